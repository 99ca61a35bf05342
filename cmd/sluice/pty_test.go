package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// The pseudo-terminals of TestLiveAreaAndLogs and TestRunProgressOnTerminal,
// opened with golang.org/x/sys/unix (which the binary already uses) the way
// Linux's posix_openpt, unlockpt and ptsname do, rather than with a
// test-only dependency in the module graph. Linux only, as the suite is
// (internal/testsrv's Pdeathsig).

// openPTY opens a new pseudo-terminal: its controlling side and its
// terminal, of rows×cols.
func openPTY(rows, cols uint16) (ptmx, tty *os.File, err error) {
	ptmx, err = os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	fd := int(ptmx.Fd())
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err == nil {
		err = unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0) // unlockpt
	}
	if err == nil {
		err = unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}
	if err == nil {
		tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	}
	if err != nil {
		ptmx.Close()
		return nil, nil, err
	}
	return ptmx, tty, nil
}

// startOnPTY starts cmd in a new session whose controlling terminal is a
// new pseudo-terminal of rows×cols, on its stdin, stdout and stderr, and
// returns the terminal's controlling side.
func startOnPTY(cmd *exec.Cmd, rows, cols uint16) (*os.File, error) {
	ptmx, tty, err := openPTY(rows, cols)
	if err != nil {
		return nil, err
	}
	defer tty.Close()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		ptmx.Close()
		return nil, err
	}
	return ptmx, nil
}
