package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/cairn-registry/cairn/internal/bench/dataset"
)

// lockWork fills in the default deb cache and work dirs of profile p and
// locks the work dir until unlock is called. A second run on the same dir
// would rebuild the first one's stores under it (a kept store reprocessed
// halfway by another run restores wrong bytes), so it is refused at once,
// naming the run that holds the dir. The lock is the kernel's: it goes
// with the process, however that ends.
func lockWork(cache, work *string, p dataset.Profile) (unlock func(), err error) {
	if *cache == "" {
		*cache = dataset.DefaultCacheDir()
	}
	if *work == "" {
		*work = filepath.Join(*cache, "work-"+string(p))
	}
	if err := os.MkdirAll(*work, 0o755); err != nil {
		return nil, err
	}
	name := filepath.Join(*work, "lock")
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(name)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("work dir %s is in use by another cairn-lab run (pid %s); wait for it or pass another --work", *work, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() { f.Close() }, nil
}
