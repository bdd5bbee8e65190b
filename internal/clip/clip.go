// Package clip shortens text quoted in messages (policy verdicts, parse
// errors) without cutting a UTF-8 character in two.
package clip

// To shortens s to n bytes, or fewer so as to end on a rune boundary, and
// marks the cut with "…"; s itself when it is no longer than n.
func To(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
