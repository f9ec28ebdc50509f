package scrub

import (
	"strings"
)

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
