// Package tenant maps API keys to tenants, each with a priority class, a
// request rate (token bucket) and a concurrency limit. Keys are stored
// hashed: the file holds the SHA-256 of each key in hex, so it grants
// nothing to whoever reads it. File reloads the file when it changes and
// keeps each tenant's bucket and requests in flight across reloads.
//
// The file (YAML):
//
//	tenants:
//	  - name: acme
//	    priority: high          # low, normal (default) or high
//	    rate: 20                # requests per second; 0: unlimited
//	    burst: 40               # bucket size; default max(rate, 1)
//	    max_concurrency: 10     # requests in flight; 0: unlimited
//	    weight: 2               # share of admission among its priority's tenants; default 1
//	    keys:                   # sha256 hex of each API key
//	      - 2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae
//
// `printf %s "$KEY" | sha256sum` gives a key's hash.
package tenant

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/switchyard-llm/switchyard/gateway/shed"
)

// ErrInvalid marks a tenant file that does not parse or validate.
var ErrInvalid = errors.New("invalid tenant file")

// Tenant is one tenant of a Set. Allow and Start are safe for concurrent
// use.
type Tenant struct {
	Name           string
	Priority       shed.Priority
	Rate           float64 // requests per second; 0: unlimited
	Burst          float64
	MaxConcurrency int64 // 0: unlimited
	// Weight is the tenant's share of the admission queue's slots
	// relative to the other tenants of its priority while they contend
	// (admit.Request.Weight); default 1.
	Weight float64
	st     *state
}

// state is a tenant's live state, kept across reloads by name.
type state struct {
	mu       sync.Mutex
	tokens   float64
	last     time.Time
	inflight atomic.Int64
}

// Allow takes one request from the tenant's bucket at now. When the
// bucket is empty it returns false and how long until a token.
func (t *Tenant) Allow(now time.Time) (ok bool, retryAfter time.Duration) {
	if t.Rate <= 0 {
		return true, 0
	}
	s := t.st
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last.IsZero() {
		s.tokens = t.Burst
	} else if dt := now.Sub(s.last).Seconds(); dt > 0 {
		s.tokens = min(t.Burst, s.tokens+dt*t.Rate)
	}
	if now.After(s.last) || s.last.IsZero() {
		s.last = now
	}
	if s.tokens >= 1 {
		s.tokens--
		return true, 0
	}
	return false, time.Duration((1 - s.tokens) / t.Rate * float64(time.Second))
}

// Start counts one request in flight unless the tenant is at its
// concurrency limit; every true return must be paired with one Done.
func (t *Tenant) Start() bool {
	n := t.st.inflight.Add(1)
	if t.MaxConcurrency > 0 && n > t.MaxConcurrency {
		t.st.inflight.Add(-1)
		return false
	}
	return true
}

// Done ends a request Start counted.
func (t *Tenant) Done() { t.st.inflight.Add(-1) }

// InFlight returns the tenant's requests in flight.
func (t *Tenant) InFlight() int64 { return t.st.inflight.Load() }

// Set is a parsed tenant file: tenants by key hash.
type Set struct {
	byKey   map[[sha256.Size]byte]*Tenant
	tenants []*Tenant
}

// Lookup returns the tenant of an API key, or nil.
func (s *Set) Lookup(key string) *Tenant {
	if s == nil || key == "" {
		return nil
	}
	return s.byKey[sha256.Sum256([]byte(key))]
}

// Tenants returns the set's tenants in file order.
func (s *Set) Tenants() []*Tenant { return s.tenants }

type fileTenant struct {
	Name           string   `yaml:"name"`
	Priority       string   `yaml:"priority"`
	Rate           float64  `yaml:"rate"`
	Burst          float64  `yaml:"burst"`
	MaxConcurrency int64    `yaml:"max_concurrency"`
	Weight         *float64 `yaml:"weight"`
	Keys           []string `yaml:"keys"`
}

// Parse parses and validates a tenant file. prev, when not nil, lends
// its tenants' live state (bucket, requests in flight) to the tenants of
// the same name.
func Parse(b []byte, prev *Set) (*Set, error) {
	var f struct {
		Tenants []fileTenant `yaml:"tenants"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	old := map[string]*state{}
	if prev != nil {
		for _, t := range prev.tenants {
			old[t.Name] = t.st
		}
	}
	s := &Set{byKey: map[[sha256.Size]byte]*Tenant{}}
	names := map[string]bool{}
	for i, ft := range f.Tenants {
		if ft.Name == "" {
			return nil, fmt.Errorf("%w: tenant %d has no name", ErrInvalid, i+1)
		}
		if names[ft.Name] {
			return nil, fmt.Errorf("%w: tenant %q appears twice", ErrInvalid, ft.Name)
		}
		names[ft.Name] = true
		prio, err := shed.ParsePriority(ft.Priority)
		if err != nil {
			return nil, fmt.Errorf("%w: tenant %q: %w", ErrInvalid, ft.Name, err)
		}
		if !(ft.Rate >= 0) || math.IsInf(ft.Rate, 0) || !(ft.Burst >= 0) || math.IsInf(ft.Burst, 0) || ft.MaxConcurrency < 0 {
			return nil, fmt.Errorf("%w: tenant %q: rate, burst and max_concurrency must be finite and >= 0", ErrInvalid, ft.Name)
		}
		weight := 1.0
		if ft.Weight != nil {
			weight = *ft.Weight
			if !(weight > 0) || math.IsInf(weight, 0) {
				return nil, fmt.Errorf("%w: tenant %q: weight must be finite and > 0", ErrInvalid, ft.Name)
			}
		}
		t := &Tenant{Name: ft.Name, Priority: prio, Rate: ft.Rate, Burst: ft.Burst, MaxConcurrency: ft.MaxConcurrency, Weight: weight, st: old[ft.Name]}
		if t.Burst == 0 {
			t.Burst = max(t.Rate, 1)
		}
		if t.st == nil {
			t.st = &state{}
		}
		if len(ft.Keys) == 0 {
			return nil, fmt.Errorf("%w: tenant %q has no keys", ErrInvalid, ft.Name)
		}
		for _, k := range ft.Keys {
			var h [sha256.Size]byte
			k = strings.TrimSpace(k)
			if len(k) != 2*sha256.Size {
				return nil, fmt.Errorf("%w: tenant %q: key %q is not a sha256 hex digest", ErrInvalid, ft.Name, k)
			}
			if _, err := hex.Decode(h[:], []byte(k)); err != nil {
				return nil, fmt.Errorf("%w: tenant %q: key %q is not a sha256 hex digest", ErrInvalid, ft.Name, k)
			}
			if o, dup := s.byKey[h]; dup {
				return nil, fmt.Errorf("%w: a key of tenant %q is also tenant %q's", ErrInvalid, ft.Name, o.Name)
			}
			s.byKey[h] = t
		}
		s.tenants = append(s.tenants, t)
	}
	return s, nil
}

// HashKey returns the hex SHA-256 of an API key, as the file holds it.
func HashKey(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}
