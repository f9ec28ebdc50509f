package filesystem

import (
	"os"
	"strings"
)

// bootID returns the kernel's boot id, new at every boot, or "".
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
