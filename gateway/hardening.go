package gateway

import (
	"time"

	"github.com/switchyard-llm/switchyard/gateway/httpserver"
)

// Defaults of the HTTP hardening options.
const (
	DefaultBodyTimeout = httpserver.DefaultBodyTimeout
	DefaultMinBodyRate = httpserver.DefaultMinBodyRate
	DefaultBodyGrace   = httpserver.DefaultBodyGrace
)

// BodyTimeout bounds the arrival of a request body, from the end of its
// head, on both HTTP servers; a body that misses it gets 408
// request_timeout and the connection is closed. Default 30s; 0 means the
// default, d < 0 none.
func BodyTimeout(d time.Duration) Opt { return opt(func(c *cfg) { c.bodyLimits.Timeout = d }) }

// MinBodyRate is the least average rate, in bytes per second, at which a
// request body must arrive once DefaultBodyGrace (5s) has passed (the
// n-th byte is due 5s + n/rate after the head); a slower body gets 408
// request_timeout. Default 1024; 0 means the default, n < 0 none.
func MinBodyRate(bytesPerSecond int64) Opt {
	return opt(func(c *cfg) { c.bodyLimits.MinRate = bytesPerSecond })
}

// RawSyscalls makes the fast HTTP server and the engine client read and
// write their sockets with raw recvfrom/sendto system calls (Linux only),
// which skip the Go scheduler's syscall bookkeeping and sysmon's
// retaking of the P (0.61-0.69x the gateway's CPU per request in
// bench/gateway, docs/gateway.md). Default true; false: the
// connections' own Read and Write.
func RawSyscalls(on bool) Opt { return opt(func(c *cfg) { c.rawSyscalls = on }) }
