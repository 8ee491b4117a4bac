// Package suggest finds the known name a mistyped one was probably meant
// to be, for the "did you mean" hints of configuration errors: unknown URL
// query parameters (driver/urlopt) and unknown YAML fields (bridge).
package suggest

import "strings"

// Closest returns the name in known that name is most likely a typo of,
// or "" when none is close enough: the one with the fewest single-byte
// edits (insertions, deletions, substitutions, case ignored), allowed up
// to 2 edits, or a third of the known name's length when that is more
// ("inflite" for "inflight"), and fewer edits than the known name is
// long. Of equally close names the first in known wins. It does not
// modify known.
func Closest(name string, known []string) string {
	name = strings.ToLower(name)
	best, bestD := "", -1
	for _, k := range known {
		if k == "" {
			continue
		}
		d := distance(name, strings.ToLower(k))
		if d > max(2, (len(k)+2)/3) || d >= len(k) {
			continue
		}
		if bestD < 0 || d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// distance is the Levenshtein distance of a and b, in bytes.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
