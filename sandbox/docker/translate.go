package docker

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/agentapi/egresswire"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/hostcgroup"
)

// ContainerName returns the container name of a session's sandbox:
// shellbox-<tenant>-<session>-<hash>, the ids with characters Docker does not
// allow in names replaced by '_', and a hash of the exact pair so that pairs
// that sanitise alike ("a-b"/"c" and "a"/"b-c") never share a name. The name
// makes a second create for a session fail with a conflict, and lets Get find
// a session's sandbox with one inspect.
func ContainerName(tenant, session string) string {
	sum := sha256.Sum256([]byte(tenant + "\x00" + session))
	return "shellbox-" + sanitise(tenant) + "-" + sanitise(session) + "-" + hex.EncodeToString(sum[:5])
}

func sanitise(id string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
			return r
		}
		return '_'
	}, id)
}

// Capabilities the agent (PID 1, uid 0) keeps. It needs SETUID and SETGID to
// start each command as the sandbox user with its own supplementary group,
// and KILL to signal commands that are no longer its uid's. A command gets
// none of them: changing uid from 0 to non-zero clears the permitted and
// effective sets, and no-new-privileges stops setuid binaries from getting
// any back.
//
// CAP_SETPCAP is for the agent's first act: it empties the bounding set
// (which commands inherit) of all its threads, then drops CAP_SETPCAP
// (agent, capabilities.go), so a command's CapBnd is 0.
var agentCaps = []string{"CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_SETPCAP"}

// translate turns a validated Spec into the container's config: binds are
// spec.Mounts as the engine mounts them (their sources pinned at neutral
// paths, hostdir.Pin; spec.Mounts themselves are recorded in LabelMounts),
// hostDir is the session's host directory, workspace the session's host
// workspace ("": none, the sandbox gets a tmpfs of its own), agent the
// agent binary's host path, runtime the engine's name for spec.Runtime. It
// is pure; every hardening decision of the Docker backend is here.
func translate(spec sandbox.Spec, binds []sandbox.Mount, hostDir, workspace, agent, runtime string) (*container.Config, *container.HostConfig) {
	quota, period := sandbox.CPUQuota(spec.CPUs)
	labels := spec.ReservedLabels()
	labels[sandbox.LabelMounts] = sandbox.MountsRecord(spec.Mounts)
	if spec.Settings != "" {
		labels[sandbox.LabelSettings] = spec.Settings
	}

	env := slices.Clone(spec.Env)
	env = append(env, sandbox.EnvSpillBytes+"="+strconv.FormatInt(spec.SpillBytes, 10))

	args := append([]string{}, spec.AgentArgs...)
	if spec.Network == sandbox.NetworkEgress {
		// Still no interface but loopback (NetworkMode below): the agent's
		// proxy listens there and the server relays its connections.
		args = append(args, "--egress-listen", egresswire.DefaultListen)
	}
	cfg := &container.Config{
		Image:      spec.Image,
		Hostname:   "sandbox",
		Entrypoint: []string{sandbox.AgentPath},
		// Non-nil: with an Entrypoint given, the image's CMD must not leak in
		// as the agent's arguments.
		Cmd:        args,
		Env:        env,
		User:       "0:0", // the agent; it runs commands as spec.UID:GID
		WorkingDir: sandbox.WorkspacePath,
		Labels:     labels,
	}

	// The commands' limit, plus the agent's and its exec guard's threads
	// (agentapi.PidsCgroupLimit).
	pids := agentapi.PidsCgroupLimit(spec.PidsLimit)
	// No POSIX message queues: RLIMIT_MSGQUEUE 0 makes every mq_open that
	// creates one fail (EMFILE), for root too, so /dev/mqueue (runc) is no
	// writable space outside the policy's sizes.
	ulimits := []*container.Ulimit{{Name: "core", Soft: 0, Hard: 0}, {Name: "msgqueue", Soft: 0, Hard: 0}}
	if spec.Runtime == sandbox.RuntimeRunsc {
		// Under gVisor the pids cgroup counts the threads of the gVisor
		// kernel (the ptrace platform spends several host threads per guest
		// task, ~50 idle), not the workload's processes: a limit sized for
		// the workload kills the sandbox under ordinary use. The workload's
		// limit is RLIMIT_NPROC, which gVisor counts per uid among its own
		// tasks, so inside one sandbox only; the cgroup stays as a host
		// backstop. (On runc RLIMIT_NPROC would count the uid's processes
		// across the host, so it is not used there.)
		pids = runscHostPids(spec.PidsLimit)
		ulimits = append(ulimits, &container.Ulimit{Name: "nproc", Soft: spec.PidsLimit, Hard: spec.PidsLimit})
	}
	caps := slices.Clone(agentCaps)
	if spec.Runtime == sandbox.RuntimeRunsc {
		// For the egress proxy's lookups (sandbox.GVisorLookupCaps).
		caps = append(caps, sandbox.GVisorLookupCaps...)
	}
	noInit := false
	hc := &container.HostConfig{
		NetworkMode: container.NetworkMode(sandbox.NetworkNone),
		Runtime:     runtime,
		CapDrop:     []string{"ALL"},
		CapAdd:      caps,
		// The default seccomp profile stays: only "seccomp=unconfined" or a
		// custom profile would change it.
		SecurityOpt:    []string{"no-new-privileges"},
		ReadonlyRootfs: true,
		// tmpfs is the only way to cap the writable directories: overlay
		// storage (fuse-overlayfs here) has no per-container quota. "exec" is
		// explicit because Docker adds noexec to tmpfs mounts otherwise, and
		// agents run scripts they write to /workspace and /tmp.
		Tmpfs: map[string]string{
			sandbox.TmpPath: fmt.Sprintf("rw,exec,nosuid,nodev,size=%d,mode=1777", spec.TmpBytes),
			sandbox.WorkspacePath: fmt.Sprintf("rw,exec,nosuid,nodev,size=%d,uid=%d,gid=%d,mode=0755",
				spec.WorkspaceBytes, spec.UID, spec.GID),
		},
		Mounts: []mount.Mount{
			{
				Type: mount.TypeBind, Source: agent, Target: sandbox.AgentPath, ReadOnly: true,
				BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
			},
			{
				// Recursive, so the spill tmpfs mounted on the host's spill/
				// is what the sandbox sees too. Writable, for the agent (uid
				// 0); commands cannot write: the directories are root's, 0755.
				Type: mount.TypeBind, Source: hostDir, Target: sandbox.HostDirMount,
				BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
			},
		},
		Resources: container.Resources{
			// A tenant's quota of all its sandboxes together: its parent
			// cgroup (sandbox/hostcgroup); Docker's own (/docker) without.
			CgroupParent: cgroupParent(spec),
			Memory:       spec.MemoryBytes,
			MemorySwap:   spec.MemoryBytes, // = Memory: no swap
			// Over sandbox.CPUPeriod (10 ms), not NanoCPUs' 100 ms.
			CPUPeriod: period,
			CPUQuota:  quota,
			PidsLimit: &pids,
			Ulimits:   ulimits,
		},
		// /dev/shm is a tmpfs (private IPC namespace) as big as /tmp: the
		// same scratch budget of the policy (sandbox.tmp), not Docker's
		// default 64 MiB, and its pages count towards the memory limit.
		ShmSize:       spec.TmpBytes,
		LogConfig:     container.LogConfig{Type: "none"}, // output goes through the agent
		Init:          &noInit,                           // the agent is PID 1 and reaps
		IpcMode:       container.IPCModePrivate,
		CgroupnsMode:  container.CgroupnsModePrivate, // API 1.41
		OomScoreAdj:   0,
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
	}
	if workspace != "" {
		// The session's workspace, a tmpfs of spec.WorkspaceBytes that
		// shellbox mounted on the host (sandbox/hostdir): it outlives the
		// container, so the session's next sandbox finds its files. Its
		// root is the sandbox user's; nosuid and nodev are the tmpfs's own.
		delete(hc.Tmpfs, sandbox.WorkspacePath)
		hc.Mounts = append(hc.Mounts, mount.Mount{
			Type: mount.TypeBind, Source: workspace, Target: sandbox.WorkspacePath,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate, NonRecursive: true},
		})
	}
	for _, m := range binds {
		// Non-recursive: on API 1.41 a read-only recursive bind leaves the
		// filesystems mounted below its source writable (ReadOnly remounts
		// the top one only), and an allowlisted directory should not bring
		// whatever the host mounted under it. The API has no nosuid or
		// nodev for binds; no-new-privileges and the empty capability set
		// make setuid files inert, and the device cgroup (runc) or gVisor's
		// own device table keeps host device nodes closed.
		hc.Mounts = append(hc.Mounts, mount.Mount{
			Type: mount.TypeBind, Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate, NonRecursive: true},
		})
	}
	return cfg, hc
}

// runscHostPids is the host pids cgroup limit of a gVisor sandbox whose
// workload may have n tasks: measured on runsc 2022-12 (ptrace platform), a
// fork bomb held at 64 tasks used ~800 host pids.
func runscHostPids(n int64) int64 { return 16*n + 512 }

// cgroupParent is the sandbox's cgroup parent: its tenant's when the
// tenant has a quota (Spec.TenantCPUs), else the engine's default ("").
// A tenant id Parent refuses (never one of a validated Spec) gets the
// default: Create's hostcgroup.Ensure refuses it before the engine sees
// the container.
func cgroupParent(spec sandbox.Spec) string {
	if spec.TenantCPUs <= 0 {
		return ""
	}
	p, _ := hostcgroup.Parent(spec.Tenant)
	return p
}
