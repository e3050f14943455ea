package gateway

import "bytes"

// jscan is a strict single-pass JSON scanner over a request body: it
// validates the JSON grammar (RFC 8259) while skipping values, without
// allocating. It accepts a subset of what encoding/json accepts (it may
// give up on valid input, never accept invalid input), so a caller falls
// back to encoding/json whenever it fails.
type jscan struct {
	b     []byte
	i     int
	depth int
}

// maxScanDepth bounds nesting; deeper input goes to encoding/json.
const maxScanDepth = 512

func (s *jscan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// str scans a string whose opening quote is at s.i and returns its
// content span; plain reports that it has no escapes and only ASCII (its
// bytes are its value).
func (s *jscan) str() (start, end int, plain, ok bool) {
	s.i++ // opening quote
	start, plain = s.i, true
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			end = s.i
			s.i++
			return start, end, plain, true
		case c == '\\':
			plain = false
			s.i++
			if s.i >= len(s.b) {
				return 0, 0, false, false
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				if s.i+4 >= len(s.b) {
					return 0, 0, false, false
				}
				for _, h := range s.b[s.i+1 : s.i+5] {
					if !isHex(h) {
						return 0, 0, false, false
					}
				}
				s.i += 5
			default:
				return 0, 0, false, false
			}
		case c < 0x20:
			return 0, 0, false, false
		default:
			if c >= 0x80 {
				plain = false
			}
			s.i++
		}
	}
	return 0, 0, false, false
}

func isHex(c byte) bool {
	return ('0' <= c && c <= '9') || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F')
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *jscan) number() bool {
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.i < len(s.b) && '1' <= s.b[s.i] && s.b[s.i] <= '9':
		for s.i < len(s.b) && isDigit(s.b[s.i]) {
			s.i++
		}
	default:
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.i >= len(s.b) || !isDigit(s.b[s.i]) {
			return false
		}
		for s.i < len(s.b) && isDigit(s.b[s.i]) {
			s.i++
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.i >= len(s.b) || !isDigit(s.b[s.i]) {
			return false
		}
		for s.i < len(s.b) && isDigit(s.b[s.i]) {
			s.i++
		}
	}
	return true
}

func (s *jscan) literal(lit string) bool {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return false
	}
	s.i += len(lit)
	return true
}

// value skips one value starting at s.i (after white space).
func (s *jscan) value() bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; c {
	case '"':
		_, _, _, ok := s.str()
		return ok
	case '{', '[':
		return s.container(c)
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	default:
		return s.number()
	}
}

// container skips an object or array whose opening bracket is at s.i.
func (s *jscan) container(open byte) bool {
	if s.depth++; s.depth > maxScanDepth {
		return false
	}
	defer func() { s.depth-- }()
	close := byte(']')
	if open == '{' {
		close = '}'
	}
	s.i++
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == close {
		s.i++
		return true
	}
	for {
		if open == '{' {
			if s.i >= len(s.b) || s.b[s.i] != '"' {
				return false
			}
			if _, _, _, ok := s.str(); !ok {
				return false
			}
			s.ws()
			if s.i >= len(s.b) || s.b[s.i] != ':' {
				return false
			}
			s.i++
			s.ws()
		}
		if !s.value() {
			return false
		}
		s.ws()
		if s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.ws()
		case close:
			s.i++
			return true
		default:
			return false
		}
	}
}

// object scans the object at s.i, calling field for each key (its value
// starts at s.i after white space; field must scan it). It gives up on a
// key with escapes or non-ASCII bytes, and on a key that matches one of
// names only case-insensitively or repeats one of them (encoding/json
// would decide those); field gets the index in names, or -1.
func (s *jscan) object(names []string, field func(i int) bool) bool {
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		return false
	}
	if s.depth++; s.depth > maxScanDepth {
		return false
	}
	s.i++
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		s.depth--
		return true
	}
	var seen uint32
	for {
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return false
		}
		ks, ke, plain, ok := s.str()
		if !ok || !plain {
			return false
		}
		key := s.b[ks:ke]
		f := -1
		for i, name := range names {
			if len(key) != len(name) {
				continue
			}
			if string(key) == name {
				f = i
				break
			}
			if bytes.EqualFold(key, []byte(name)) {
				return false
			}
		}
		if f >= 0 {
			if seen&(1<<f) != 0 {
				return false
			}
			seen |= 1 << f
		}
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return false
		}
		s.i++
		s.ws()
		if s.i >= len(s.b) || !field(f) {
			return false
		}
		s.ws()
		if s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.ws()
		case '}':
			s.i++
			s.depth--
			return true
		default:
			return false
		}
	}
}

// uint32 scans a plain decimal integer that fits a uint32 (no sign,
// fraction or exponent).
func (s *jscan) uint32() (uint32, bool) {
	start := s.i
	var v uint64
	for s.i < len(s.b) && isDigit(s.b[s.i]) {
		v = v*10 + uint64(s.b[s.i]-'0')
		if v > 1<<32-1 {
			return 0, false
		}
		s.i++
	}
	n := s.i - start
	if n == 0 || (n > 1 && s.b[start] == '0') {
		return 0, false
	}
	if s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		return 0, false
	}
	return uint32(v), true
}

var (
	usageTop     = []string{"usage"}
	usageFields  = []string{"prompt_tokens", "completion_tokens", "prompt_tokens_details"}
	usageDetails = []string{"cached_tokens"}
)

// scanUsage reads the usage object of a chunk or response, as setUsage
// does with encoding/json; ok is false when it gives up (then
// encoding/json decides), found reports a usage object.
func scanUsage(b []byte) (u usageCounts, found, ok bool) {
	s := jscan{b: b}
	s.ws()
	ok = s.object(usageTop, func(i int) bool {
		if i < 0 {
			return s.value()
		}
		if s.b[s.i] != '{' {
			return false // null or a type error: encoding/json decides
		}
		found = true
		return s.object(usageFields, func(i int) bool {
			var ok bool
			switch i {
			case 0:
				u.prompt, ok = s.uint32()
			case 1:
				u.completion, ok = s.uint32()
			case 2:
				if s.b[s.i] != '{' {
					return false
				}
				u.hasDetails = true
				return s.object(usageDetails, func(i int) bool {
					if i < 0 {
						return s.value()
					}
					u.cached, ok = s.uint32()
					return ok
				})
			default:
				ok = s.value()
			}
			return ok
		})
	})
	s.ws()
	return u, found, ok && s.i == len(b)
}

// usageCounts are the token counts of a usage object.
type usageCounts struct {
	prompt, completion, cached uint32
	hasDetails                 bool
}
