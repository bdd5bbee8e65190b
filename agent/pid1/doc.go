// Package pid1 is what the command runner (executor/local) does differently
// as a sandbox's PID 1: it hands out tag groups, raises the agent's OOM
// score around each fork, tells an OOM kill from a plain SIGKILL, and reaps
// the orphans the agent adopts. agent/supervisor.go builds the agent's
// executor with New.
//
// Design. The runner stays generic: it is what the server runs in
// development and what the conformance suite holds every executor to.
// What PID 1 adds plugs into it through local.PID1, five methods called at
// two points of a command's life:
//
//   - launch, before each fork of the leader, with the reaper held off:
//     Tag (a supplementary group unique among the live commands, for a tree
//     no cgroup tracks; the runner adds it to the command's Credential) and
//     Fork (the fork itself, with this process's oom_score_adj raised
//     around it so the child is born with the raised score; oom.go).
//     InheritsOOMScore tells the runner not to write the score after.
//   - the supervisor, once the tree is gone and its output drained: Untag
//     (never for a tree that outlived its kill: a process stuck in an
//     uninterruptible sleep keeps its tag for good), and the verdict
//     WatchOOM returned when the command started (the memory cgroup's
//     OOM-kill counter then and now, and the leader's status; oom.go).
//
// So a tag is taken before the fork and given back only after the tree is
// gone, by the runner, which tracks and signals a tagged tree (tagtree.go
// there). Why no command can drop its tag: tag.go.
//
// Reaping (reap.go). The leaders a reaper must spare are the runner's
// state, and so is the lock that closes the race between a leader's fork
// and its registration: ReapOrphans scans for zombie children, then reaps,
// inside local.NotLeaders, only those that are no registered leader's.
// Every Executor of the process registers its leaders, hooks or not.
//
// What stays in executor/local, because it is the runner's own: the leader
// register (leaders.go), the tag tracking (tagtree.go) and network grants
// bound to a tree's tag or cgroup (grant.go), which the egress proxy asks
// through Executor.Grant. Validation of the PID-1 fields (Config.check)
// keeps the error texts the runner gave them ("local: TagGroups ...").
//
// Files: pid1.go (Config, New, the hooks), tag.go (the pool), oom.go (the
// score, the memory cgroup, the verdict), reap.go (ReapOrphans).
// The design in full: docs/architecture.md#as-a-sandboxs-pid-1.
package pid1
