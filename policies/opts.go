package policies

import "strings"

// optSpec is the command-line syntax of one wrapper, as its getopt_long
// reads it, up to its first operand (every wrapper here stops there: GNU
// tools with a "+" option string, sudo, doas, ...):
//
//   - short options cluster (-vS), and one that takes an argument takes the
//     rest of the cluster or else the next word (-n10, -n 10);
//   - a short option with an optional argument takes only the rest of its
//     cluster (xargs -i, -iX);
//   - a long option takes its argument after = or, if the argument is
//     required, from the next word; one whose argument is optional takes it
//     only after = (xargs --replace rm: rm is the command);
//   - a long option may be abbreviated to any unambiguous prefix (--rep);
//   - -- ends the options.
//
// An option the table does not know, an ambiguous abbreviation, or a word
// that is not a literal where an option could be makes the caller decide
// dynamic: the reader cannot tell where the command starts.
type optSpec struct {
	short    string   // short flags
	shortArg string   // short options with a required argument
	shortOpt string   // short options with an optional (attached) argument
	long     []string // long flags (without --)
	longArg  []string // long options with a required argument
	longOpt  []string // long options with an optional argument (=value only)
	digits   bool     // -NUM is an option (nice -10)
}

// opt is one option as read: its canonical name ("-n", "--replace"), its
// argument and whether it had one.
type opt struct {
	name string
	val  string
	has  bool
}

// parseOpts reads the options of argv from index from. It returns the index
// of the first operand and the options read; ok is false when the reader
// cannot be sure (see optSpec).
func (s *optSpec) parseOpts(argv []string, lits []bool, from int) (i int, opts []opt, ok bool) {
	i = from
	for i < len(argv) {
		if !lits[i] {
			return i, opts, false
		}
		a := argv[i]
		switch {
		case a == "--":
			return i + 1, opts, true
		case strings.HasPrefix(a, "--"):
			name, val, has := strings.Cut(a[2:], "=")
			full, kind := s.longName(name)
			switch kind {
			case 0:
				return i, opts, false
			case 'f':
				if has {
					return i, opts, false // a flag given a value: getopt refuses it
				}
			case 'a':
				if !has {
					if i+1 >= len(argv) {
						return i, opts, false
					}
					if !lits[i+1] {
						return i, opts, false
					}
					i++
					val, has = argv[i], true
				}
			}
			opts = append(opts, opt{name: "--" + full, val: val, has: has})
			i++
		case len(a) > 1 && a[0] == '-':
			if s.digits && isDigits(strings.TrimPrefix(a[1:], "+")) {
				opts = append(opts, opt{name: "-", val: a[1:], has: true})
				i++
				continue
			}
			i++
			for j := 1; j < len(a); j++ {
				c := a[j]
				switch {
				case strings.IndexByte(s.shortArg, c) >= 0:
					val := a[j+1:]
					if val == "" {
						if i >= len(argv) || !lits[i] {
							return i, opts, false
						}
						val = argv[i]
						i++
					}
					opts = append(opts, opt{name: "-" + string(c), val: val, has: true})
					j = len(a)
				case strings.IndexByte(s.shortOpt, c) >= 0:
					opts = append(opts, opt{name: "-" + string(c), val: a[j+1:], has: j+1 < len(a)})
					j = len(a)
				case strings.IndexByte(s.short, c) >= 0:
					opts = append(opts, opt{name: "-" + string(c)})
				default:
					return i - 1, opts, false
				}
			}
		default:
			return i, opts, true
		}
	}
	return i, opts, true
}

// longName resolves a long option name or an unambiguous prefix of one:
// kind is 'f' (flag), 'a' (required argument), 'o' (optional argument), 0
// (unknown or ambiguous).
func (s *optSpec) longName(name string) (string, byte) {
	if name == "" {
		return "", 0
	}
	found, kind, n := "", byte(0), 0
	for _, l := range []struct {
		names []string
		kind  byte
	}{{s.long, 'f'}, {s.longArg, 'a'}, {s.longOpt, 'o'}} {
		for _, x := range l.names {
			if x == name {
				return x, l.kind
			}
			if strings.HasPrefix(x, name) {
				found, kind = x, l.kind
				n++
			}
		}
	}
	if n != 1 {
		return "", 0
	}
	return found, kind
}

// has reports whether opts hold one of names.
func hasOpt(opts []opt, names ...string) bool {
	for _, o := range opts {
		for _, n := range names {
			if o.name == n {
				return true
			}
		}
	}
	return false
}
