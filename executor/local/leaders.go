package local

import "sync"

// The leaders a reaper must leave alone.
//
// In a sandbox the agent is PID 1, and reaps every orphan it adopts
// (agent/pid1: ReapOrphans). But it must not reap the leaders the
// supervisors wait for: a supervisor waits with waitid WNOWAIT (the zombie
// pins the leader's pid and process-group id while the tree is killed) and
// then reaps the leader itself for its exact status. A reaper that took a
// leader's zombie would lose that status (ECHILD) and free a pid still
// being signalled.
//
// So the executors of this process register every leader before anything
// can reap it, and a reaper reaps only the zombie children NotLeaders hands
// it. The race to close is the one between fork and registration: a leader
// can exit and become a zombie before launch has recorded its pid. A launch
// holds starting (shared) from before the fork until the pid is registered,
// and NotLeaders holds it exclusively while the reaper decides and reaps, so
// a zombie the reaper found (it scanned before NotLeaders took the lock) is
// either registered by the time it holds the lock or was never a leader.
// Every Executor registers, whatever its Config: a reaper in the process
// spares them all.

var (
	// starting is held shared by every launch across fork and registration,
	// exclusively by NotLeaders while the reaper decides and reaps.
	starting sync.RWMutex
	// leaders are the pids of the leaders this process's executors have
	// started and not yet reaped.
	leadersMu sync.Mutex
	leaders   = map[int]int{}
)

// registerLeader records pid as a leader a supervisor will reap. Called with
// starting held (shared).
func registerLeader(pid int) {
	leadersMu.Lock()
	leaders[pid]++
	leadersMu.Unlock()
}

// unregisterLeader forgets pid once its supervisor has reaped it.
func unregisterLeader(pid int) {
	leadersMu.Lock()
	if leaders[pid]--; leaders[pid] <= 0 {
		delete(leaders, pid)
	}
	leadersMu.Unlock()
}

func isLeader(pid int) bool {
	leadersMu.Lock()
	defer leadersMu.Unlock()
	return leaders[pid] > 0
}

// NotLeaders calls reap for each of zombies (zombie children of this
// process, found before the call) that is not a leader an Executor of this
// process has started and not yet reaped. Every launch is held off between
// its fork and its leader's registration until NotLeaders returns, so a pid
// reap is given is not, and will not become, a leader's: it is the orphan
// reaper's to wait for (agent/pid1: ReapOrphans). reap must not block on a
// live process (wait with WNOHANG) nor start a command.
func NotLeaders(zombies []int, reap func(pid int)) {
	starting.Lock()
	defer starting.Unlock()
	for _, pid := range zombies {
		if !isLeader(pid) {
			reap(pid)
		}
	}
}

// Leaders returns how many leaders the executors of this process have
// started and not yet reaped: those NotLeaders leaves alone.
func Leaders() int {
	leadersMu.Lock()
	defer leadersMu.Unlock()
	return len(leaders)
}
