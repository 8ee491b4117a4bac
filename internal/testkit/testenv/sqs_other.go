//go:build !linux

package testenv

import "os/exec"

// dieWithParent is a no-op where the kernel offers no parent-death signal;
// Stop from TestMain ends the emulator.
func dieWithParent(*exec.Cmd) {}
