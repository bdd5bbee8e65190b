package hostcgroup

import "syscall"

// errBusy is rmdir's answer for a cgroup with tasks or children.
var errBusy = syscall.EBUSY
