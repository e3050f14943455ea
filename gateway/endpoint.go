package gateway

// endpointPlain reports whether s is an endpoint of the plainest form,
// http(s)://host[:port][/path], with host letters, digits, dots and
// hyphens starting with a letter or digit, port digits and path letters,
// digits and "/._~-". url.Parse accepts every such string as an absolute
// http(s) URL with a host and no query, fragment or user info
// (FuzzEndpointPlain), so checkEndpoint accepts it without parsing: a
// snapshot of 1,000 engines has 1,000 endpoints, and parsing them was a
// fifth of applying it. Anything else is left to url.Parse.
func endpointPlain(s string) bool {
	var rest string
	switch {
	case len(s) > 7 && s[:7] == "http://":
		rest = s[7:]
	case len(s) > 8 && s[:8] == "https://":
		rest = s[8:]
	default:
		return false
	}
	if !alnum(rest[0]) {
		return false
	}
	i := 1
	for i < len(rest) && (alnum(rest[i]) || rest[i] == '.' || rest[i] == '-') {
		i++
	}
	if i < len(rest) && rest[i] == ':' {
		i++
		digits := i
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		if i == digits {
			return false
		}
	}
	if i < len(rest) && rest[i] != '/' {
		return false
	}
	for ; i < len(rest); i++ {
		if c := rest[i]; !alnum(c) && c != '/' && c != '.' && c != '_' && c != '~' && c != '-' {
			return false
		}
	}
	return true
}

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
