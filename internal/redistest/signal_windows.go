package redistest

import "syscall"

// Windows has no SIGSTOP and SIGCONT (os.Process.Signal sends only Kill
// there): Pause and Resume fail, which only tests that pause a server
// notice. The values are Linux's, so that the package builds.
var sigStop, sigCont = syscall.Signal(0x13), syscall.Signal(0x12)
