// Package usage measures what each session's sandbox used, from the
// kernel's own counters, and keeps it per tenant and session where any
// process sharing the state directory reads it (issue 27, item 2).
//
// # What is measured, and how
//
// A Sampler reads, once per interval (default 10 s), the counters of every
// running sandbox through a Source: the kernel's figures of the sandbox's
// cgroup (Cgroup, which Docker and containerd find by their sandbox's
// first process: cpuacct.usage, memory.usage_in_bytes less inactive file
// pages and memory.max_usage_in_bytes on cgroup v1, their equivalents on
// v2). From two readings of one sandbox it derives
//
//   - sandbox-seconds: the time between the readings (a sandbox counts
//     from the reading that first saw it);
//   - CPU-seconds: the growth of the cgroup's cumulative CPU time, so
//     nothing the sandbox ran between two readings is lost, however
//     short-lived;
//   - memory GiB-seconds: the memory in use at the reading times the time
//     since the one before (a step approximation, good to one interval's
//     changes); and the peak, the cgroup's own high-water mark.
//
// With the counters the Sampler measures each running session's workspace
// through a WorkspaceSource (Docker and containerd: one statfs of the
// workspace's own file system, an ext4 image or a tmpfs, so the cost is
// the same whatever it holds; nothing walks its files; Kubernetes: the
// workspace volume's used bytes in the kubelet's summary read for the
// counters, as the kubelet last measured them, up to two minutes before):
// a gauge, kept as the last value with the time it was measured
// (WorkspaceMeasured: of two buckets the later measurement wins) and a
// peak. A measurement that fails adds nothing, so the session keeps its
// last value. A tenant's workspace in a report is the sum of its
// sessions' last values (Figures.Sum).
//
// The server adds each tool call and its duration (Meter.Call), the bytes
// a foreground call spilled (Meter.Spill, from its result) and a
// background task's spill file once its end is known, and what the
// egress relay (sandbox/egress RelayConfig.Traffic) reports as it goes:
// each connection dialled to a destination, and the bytes sent to and
// received from it (Meter.Egress). These are counters: each process
// counts what it served and relayed, and the Store sums every process's
// buckets.
//
// What a sandbox used between its last reading and its removal (at most
// one interval) is not counted; the session's figures end with the reading
// that last saw it, and that is when its final record is written
// (Record.Final).
//
// Cost: one reading (and one workspace statfs) per running sandbox per
// interval, made one sandbox at a time; a Meter.Egress call (a mutex and
// a map update) per read or write of a relayed connection; plus one appended file write per tenant-day per minute. A
// reading is three small reads of the sandbox's cgroup files, their path
// found once per sandbox (a Docker inspect; containerd's container and
// task): measured on the 2-core reference machine (Docker 20.10, cgroup
// v1) at 0.11-0.16 ms of wall time and 0.12-0.20 ms of the server's CPU,
// so at the default 10 s interval 1,000 sandboxes cost about 2% of one
// core. (Docker's one-shot stats API, its fallback where the cgroup files
// cannot be read, took 1 s a sandbox on Engine 20.10.)
//
// # Where it is kept, and why there
//
// Deltas are summed in memory per (tenant, session, UTC hour) and
// appended, once a minute (FlushInterval) and when the Sampler stops, to a
// Store; queries and limits read the pending buckets too. Meter.Query sums
// the buckets per session (GET /v1/usage), Meter.Series per tenant and
// hour (the console's chart). Dir, the one
// implementation, writes one JSON line per bucket to
// <dir>/<tenant>/<YYYY-MM-DD>.jsonl, opened O_APPEND, so every process on
// the host (a restarted server, `shellbox usage` reading the files) sees
// every other's lines, a crash loses at most the minute not yet written,
// and a tenant's day is one file of at most 1,440 lines per session. The
// snapshot store's session records were the other candidate: they are one
// replace-only document per session, owned by the session layer and
// deleted with the session, while usage must outlive the session and be
// summed over a tenant and a day. S3, for a fleet's replicas, which share
// no disk, keeps an object per tenant, UTC day and writing process in the
// snapshot store's bucket, rewritten whole by each of that process's
// flushes (S3 cannot append); readers sum every writer's objects.
//
// On Kubernetes one replica samples (the leader); every process runs
// Meter.Sync, which flushes the calls it counted and refreshes its
// tenants' day from the Store, so every replica's limits hold a tenant to
// what the fleet used (up to a minute late).
//
// Memory is bounded: the Sampler keeps the last reading of at most
// MaxSandboxes sandboxes, and the Meter at most MaxPending buckets between
// flushes (a call recorded past that is counted in the tenant's totals but
// not kept per session: its bucket is dropped, and Dropped counts it), and
// per tenant the totals since start and of the current UTC day.
//
// # Limits
//
// Meter.Check compares a tenant's use today (UTC) with its policy's
// limits.cpuSecondsPerDay and limits.sandboxHoursPerDay; the session layer
// asks it before a command runs. Nothing already running is stopped: a
// limit refuses new commands only.
package usage
