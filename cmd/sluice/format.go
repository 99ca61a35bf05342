package main

import (
	"strings"
	"time"
)

// plural is n with the noun in the number it takes: "1 chunk", "2 chunks",
// "1,000 lines".
func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return commas(n) + " " + many
}

// helpDuration writes a default duration of a --help text as a user types
// it: 2m, 26h, 200ms (not 2m0s).
func helpDuration(d time.Duration) string {
	s := d.String()
	s, _ = strings.CutSuffix(s, "m0s")
	if len(s) < len(d.String()) {
		s += "m"
	}
	if t, ok := strings.CutSuffix(s, "h0m"); ok {
		s = t + "h"
	}
	return s
}
