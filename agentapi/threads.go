package agentapi

// AgentTasks is the agent's share of a runc sandbox's pids cgroup: the
// threads it creates at start and never exceeds (agent: supervisor.go). The
// cgroup's limit is PidsLimit + AgentTasks (PidsCgroupLimit), so the
// commands get the PidsLimit the policy names, and, because the agent holds
// its threads before any command runs, a fork storm that fills the cgroup
// never takes a thread the agent needs. (Measured by TestDockerAgentCost:
// 30 concurrent calls with output and a fork bomb at once never made the
// agent start a 17th thread; without its bounds on blocking work, see
// agent/supervisor.go, the same load made it start up to 26.) Two more
// are for file transfers, each of which holds a thread locked to the
// sandbox user while it waits on the network (executor/files
// MaxUserThreads).
const AgentTasks = 18

// GuardTasks is the exec guard's share (agent/execguard: a process of its
// own that starts on one processor and takes a second when its loop
// begins, guardProcs): its thread that traces, blocked in wait4 or a
// ptrace stop's work, the runtime's monitor and template threads, the
// second processor's, the poller's for its socket to the agent, and
// spares. TestConcurrentCallsEnd counts them; TestDockerAgentCost sees the
// commands get their whole limit with it.
const GuardTasks = 8

// PidsCgroupLimit is the pids cgroup limit of a runc sandbox whose commands
// may have n processes and threads: n plus the agent's own (AgentTasks) and
// its exec guard's (GuardTasks).
func PidsCgroupLimit(n int64) int64 { return n + AgentTasks + GuardTasks }
