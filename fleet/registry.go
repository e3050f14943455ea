// Package fleet is the engine registry: the engines a cluster may route
// to, with their endpoints, regions and classes, as an operator states
// them in a file (docs/security.md#engine-registry). Signals never add an
// engine: the processor dead-letters a signal for an engine the registry
// does not hold or at another endpoint, the optimizer never plans one,
// and a gateway never applies a snapshot that names one. Guard bounds the
// values a registered engine's estimates claim by its own history and by
// what the gateways observe.
package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// Sentinel errors of Check; Reason gives their dead-letter reason codes.
var (
	// ErrUnregistered: the engine id is not in the registry.
	ErrUnregistered = errors.New("unregistered_engine")
	// ErrEndpoint: the engine is registered at another endpoint.
	ErrEndpoint = errors.New("endpoint_mismatch")
)

// Engine is one registered engine.
type Engine struct {
	// ID is the engine id signals and snapshots use.
	ID string `yaml:"id" json:"id"`
	// URL is the engine's base URL (http or https, no query, no user
	// info); the only endpoint its traffic may go to.
	URL string `yaml:"url" json:"url"`
	// Region and GPUClass replace what signals say.
	Region   string `yaml:"region,omitempty" json:"region,omitempty"`
	GPUClass string `yaml:"gpu_class,omitempty" json:"gpu_class,omitempty"`
	// MaxBatch and MaxReplicas, when set, are the most a signal for the
	// engine may claim (per-replica batch limit, ready replicas); a claim
	// above is quarantined (Guard). 0: no bound.
	MaxBatch    uint32 `yaml:"max_batch,omitempty" json:"max_batch,omitempty"`
	MaxReplicas uint32 `yaml:"max_replicas,omitempty" json:"max_replicas,omitempty"`
}

// Registry is a set of engines by id. A nil *Registry is no registry:
// Check accepts everything (the behaviour before registries existed).
// It is immutable and safe for concurrent use.
type Registry struct {
	engines map[string]Engine
}

// file is the registry file's shape.
type file struct {
	Engines []Engine `yaml:"engines"`
}

// maxEngines bounds a registry (and the metrics labelled by engine).
const maxEngines = 100000

// Load reads a registry file (YAML, or JSON, which is YAML).
func Load(path string) (*Registry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading engine registry: %w", err)
	}
	r, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("engine registry %s: %w", path, err)
	}
	return r, nil
}

// Parse parses a registry document:
//
//	engines:
//	  - {id: h100-a, url: "http://10.0.0.5:8000", region: us-east, gpu_class: h100}
//
// Unknown fields, duplicate ids, bad URLs and an empty list are errors.
func Parse(b []byte) (*Registry, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var f file
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	return New(f.Engines...)
}

// New returns a registry of engines, validated as Parse does.
func New(engines ...Engine) (*Registry, error) {
	if len(engines) == 0 {
		return nil, errors.New("no engines")
	}
	if len(engines) > maxEngines {
		return nil, fmt.Errorf("%d engines, at most %d", len(engines), maxEngines)
	}
	r := &Registry{engines: make(map[string]Engine, len(engines))}
	for i, e := range engines {
		if e.ID == "" {
			return nil, fmt.Errorf("engine %d: no id", i)
		}
		if _, dup := r.engines[e.ID]; dup {
			return nil, fmt.Errorf("engine %q listed twice", e.ID)
		}
		if err := validURL(e.URL); err != nil {
			return nil, fmt.Errorf("engine %q: url %q: %w", e.ID, e.URL, err)
		}
		e.URL = Normalize(e.URL)
		r.engines[e.ID] = e
	}
	return r, nil
}

func validURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return err
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("not http(s)")
	case u.Host == "":
		return errors.New("no host")
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return errors.New("user info, query or fragment")
	}
	return nil
}

// Normalize is the form endpoints are compared in: without trailing
// slashes, scheme and host in lower case.
func Normalize(s string) string {
	s = strings.TrimRight(s, "/")
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return s
	}
	host, path, _ := strings.Cut(rest, "/")
	out := strings.ToLower(scheme) + "://" + strings.ToLower(host)
	if path != "" {
		out += "/" + path
	}
	return out
}

// Lookup returns the registered engine id.
func (r *Registry) Lookup(id string) (Engine, bool) {
	if r == nil {
		return Engine{}, false
	}
	e, ok := r.engines[id]
	return e, ok
}

// Len is the number of engines (0 for no registry).
func (r *Registry) Len() int {
	if r == nil {
		return 0
	}
	return len(r.engines)
}

// Engines returns the engines by id.
func (r *Registry) Engines() []Engine {
	if r == nil {
		return nil
	}
	out := make([]Engine, 0, len(r.engines))
	for _, e := range r.engines {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Check reports whether traffic may go to engine id at endpoint: nil
// with no registry; ErrUnregistered when id is not registered;
// ErrEndpoint when endpoint is neither empty nor the registered one.
func (r *Registry) Check(id, endpoint string) error {
	if r == nil {
		return nil
	}
	e, ok := r.engines[id]
	if !ok {
		return fmt.Errorf("%w: engine %q is not in the registry", ErrUnregistered, id)
	}
	if endpoint != "" && Normalize(endpoint) != e.URL {
		return fmt.Errorf("%w: engine %q is registered at %s, not %s", ErrEndpoint, id, e.URL, endpoint)
	}
	return nil
}

// Reason is the dead-letter and metric reason code of a Check error:
// "unregistered_engine", "endpoint_mismatch", else "".
func Reason(err error) string {
	switch {
	case errors.Is(err, ErrUnregistered):
		return ErrUnregistered.Error()
	case errors.Is(err, ErrEndpoint):
		return ErrEndpoint.Error()
	}
	return ""
}
