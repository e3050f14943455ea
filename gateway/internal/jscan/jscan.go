// Package jscan is a strict single-pass JSON scanner for the gateway's
// fast paths (request fields, usage objects): it validates the JSON
// grammar (RFC 8259) while skipping values, without allocating.
package jscan

import "bytes"

// Scanner is a strict single-pass JSON scanner over B: it
// validates the JSON grammar (RFC 8259) while skipping values, without
// allocating. It accepts a subset of what encoding/json accepts (it may
// give up on valid input, never accept invalid input), so a caller falls
// back to encoding/json whenever it fails.
type Scanner struct {
	B     []byte // the input
	I     int    // the offset of the next byte to scan
	Depth int    // nesting depth (start at 1 inside an object scanned by hand)
}

// maxScanDepth bounds nesting; deeper input goes to encoding/json.
const maxScanDepth = 512

// WS skips white space.
func (s *Scanner) WS() {
	for s.I < len(s.B) {
		switch s.B[s.I] {
		case ' ', '\t', '\n', '\r':
			s.I++
		default:
			return
		}
	}
}

// Str scans a string whose opening quote is at s.I and returns its
// content span; plain reports that it has no escapes and only ASCII (its
// bytes are its value).
func (s *Scanner) Str() (start, end int, plain, ok bool) {
	s.I++ // opening quote
	start, plain = s.I, true
	for s.I < len(s.B) {
		c := s.B[s.I]
		switch {
		case c == '"':
			end = s.I
			s.I++
			return start, end, plain, true
		case c == '\\':
			plain = false
			s.I++
			if s.I >= len(s.B) {
				return 0, 0, false, false
			}
			switch s.B[s.I] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.I++
			case 'u':
				if s.I+4 >= len(s.B) {
					return 0, 0, false, false
				}
				for _, h := range s.B[s.I+1 : s.I+5] {
					if !isHex(h) {
						return 0, 0, false, false
					}
				}
				s.I += 5
			default:
				return 0, 0, false, false
			}
		case c < 0x20:
			return 0, 0, false, false
		default:
			if c >= 0x80 {
				plain = false
			}
			s.I++
		}
	}
	return 0, 0, false, false
}

func isHex(c byte) bool {
	return ('0' <= c && c <= '9') || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F')
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// Number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *Scanner) Number() bool {
	if s.I < len(s.B) && s.B[s.I] == '-' {
		s.I++
	}
	switch {
	case s.I < len(s.B) && s.B[s.I] == '0':
		s.I++
	case s.I < len(s.B) && '1' <= s.B[s.I] && s.B[s.I] <= '9':
		for s.I < len(s.B) && isDigit(s.B[s.I]) {
			s.I++
		}
	default:
		return false
	}
	if s.I < len(s.B) && s.B[s.I] == '.' {
		s.I++
		if s.I >= len(s.B) || !isDigit(s.B[s.I]) {
			return false
		}
		for s.I < len(s.B) && isDigit(s.B[s.I]) {
			s.I++
		}
	}
	if s.I < len(s.B) && (s.B[s.I] == 'e' || s.B[s.I] == 'E') {
		s.I++
		if s.I < len(s.B) && (s.B[s.I] == '+' || s.B[s.I] == '-') {
			s.I++
		}
		if s.I >= len(s.B) || !isDigit(s.B[s.I]) {
			return false
		}
		for s.I < len(s.B) && isDigit(s.B[s.I]) {
			s.I++
		}
	}
	return true
}

// Literal scans lit (true, false or null).
func (s *Scanner) Literal(lit string) bool {
	if len(s.B)-s.I < len(lit) || string(s.B[s.I:s.I+len(lit)]) != lit {
		return false
	}
	s.I += len(lit)
	return true
}

// Value skips one value starting at s.I (after white space).
func (s *Scanner) Value() bool {
	if s.I >= len(s.B) {
		return false
	}
	switch c := s.B[s.I]; c {
	case '"':
		_, _, _, ok := s.Str()
		return ok
	case '{', '[':
		return s.container(c)
	case 't':
		return s.Literal("true")
	case 'f':
		return s.Literal("false")
	case 'n':
		return s.Literal("null")
	default:
		return s.Number()
	}
}

// container skips an object or array whose opening bracket is at s.I.
func (s *Scanner) container(open byte) bool {
	if s.Depth++; s.Depth > maxScanDepth {
		return false
	}
	defer func() { s.Depth-- }()
	close := byte(']')
	if open == '{' {
		close = '}'
	}
	s.I++
	s.WS()
	if s.I < len(s.B) && s.B[s.I] == close {
		s.I++
		return true
	}
	for {
		if open == '{' {
			if s.I >= len(s.B) || s.B[s.I] != '"' {
				return false
			}
			if _, _, _, ok := s.Str(); !ok {
				return false
			}
			s.WS()
			if s.I >= len(s.B) || s.B[s.I] != ':' {
				return false
			}
			s.I++
			s.WS()
		}
		if !s.Value() {
			return false
		}
		s.WS()
		if s.I >= len(s.B) {
			return false
		}
		switch s.B[s.I] {
		case ',':
			s.I++
			s.WS()
		case close:
			s.I++
			return true
		default:
			return false
		}
	}
}

// Object scans the object at s.I, calling field for each key (its value
// starts at s.I after white space; field must scan it). It gives up on a
// key with escapes or non-ASCII bytes, and on a key that matches one of
// names only case-insensitively or repeats one of them (encoding/json
// would decide those); field gets the index in names, or -1.
func (s *Scanner) Object(names []string, field func(i int) bool) bool {
	if s.I >= len(s.B) || s.B[s.I] != '{' {
		return false
	}
	if s.Depth++; s.Depth > maxScanDepth {
		return false
	}
	s.I++
	s.WS()
	if s.I < len(s.B) && s.B[s.I] == '}' {
		s.I++
		s.Depth--
		return true
	}
	var seen uint32
	for {
		if s.I >= len(s.B) || s.B[s.I] != '"' {
			return false
		}
		ks, ke, plain, ok := s.Str()
		if !ok || !plain {
			return false
		}
		key := s.B[ks:ke]
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
		s.WS()
		if s.I >= len(s.B) || s.B[s.I] != ':' {
			return false
		}
		s.I++
		s.WS()
		if s.I >= len(s.B) || !field(f) {
			return false
		}
		s.WS()
		if s.I >= len(s.B) {
			return false
		}
		switch s.B[s.I] {
		case ',':
			s.I++
			s.WS()
		case '}':
			s.I++
			s.Depth--
			return true
		default:
			return false
		}
	}
}

// Uint32 scans a plain decimal integer that fits a uint32 (no sign,
// fraction or exponent).
func (s *Scanner) Uint32() (uint32, bool) {
	start := s.I
	var v uint64
	for s.I < len(s.B) && isDigit(s.B[s.I]) {
		v = v*10 + uint64(s.B[s.I]-'0')
		if v > 1<<32-1 {
			return 0, false
		}
		s.I++
	}
	n := s.I - start
	if n == 0 || (n > 1 && s.B[start] == '0') {
		return 0, false
	}
	if s.I < len(s.B) && (s.B[s.I] == '.' || s.B[s.I] == 'e' || s.B[s.I] == 'E') {
		return 0, false
	}
	return uint32(v), true
}
