package main

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/switchyard-llm/switchyard/internal/cli"
	gatewaycmd "github.com/switchyard-llm/switchyard/services/gateway"
)

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       any               `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Expose      []string          `yaml:"expose"`
	DependsOn   any               `yaml:"depends_on"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	Volumes         []string `yaml:"volumes"`
	Profiles        []string `yaml:"profiles"`
	StopGracePeriod string   `yaml:"stop_grace_period"`
	Deploy          *struct {
		Replicas *int `yaml:"replicas"`
	} `yaml:"deploy"`
}

// replicas is the service's container count (deploy.replicas, default 1).
func (s composeService) replicas() int {
	if s.Deploy == nil || s.Deploy.Replicas == nil {
		return 1
	}
	return *s.Deploy.Replicas
}

// inProfile reports whether s runs only with profile p.
func (s composeService) inProfile(p string) bool {
	return slices.Contains(s.Profiles, p)
}

type promConfig struct {
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

var flagName = regexp.MustCompile(`--([a-z0-9-]+) \(env ([A-Z0-9_]+), default "([^"]*)"\)`)

// commandFlags asks a command for its usage and returns flag -> default.
func commandFlags(t *testing.T, c cli.Command) map[string]string {
	t.Helper()
	err := c.Run(context.Background(), []string{"--help"}, nil, nil)
	if !errors.Is(err, cli.ErrUsage) {
		t.Fatalf("%s --help: %v, want a usage error", c.Name, err)
	}
	out := map[string]string{}
	for _, m := range flagName.FindAllStringSubmatch(err.Error(), -1) {
		out[m[1]] = m[3]
	}
	if len(out) == 0 {
		t.Fatalf("%s --help lists no flags:\n%v", c.Name, err)
	}
	return out
}

func containerPorts(s composeService) map[string]bool {
	out := map[string]bool{}
	for _, p := range append(append([]string(nil), s.Ports...), s.Expose...) {
		p = strings.TrimSuffix(p, "/tcp")
		if i := strings.LastIndex(p, ":"); i >= 0 {
			p = p[i+1:]
		}
		out[p] = true
	}
	return out
}

// TestComposeMatchesBinary parses docker-compose.yml (which cannot run
// here: no Docker engine) and checks that every service built from our
// Dockerfile runs a real command with real flags, that listen ports are
// published, that brokers and NATS URLs point at compose services, and that
// Prometheus scrapes ports the services listen on.
func TestComposeMatchesBinary(t *testing.T) {
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.Unmarshal(b, &cf); err != nil {
		t.Fatalf("parsing docker-compose.yml: %v", err)
	}
	cmds := map[string]cli.Command{}
	for _, c := range commands() {
		cmds[c.Name] = c
	}
	for _, infra := range []string{"kafka", "nats", "prometheus"} {
		if _, ok := cf.Services[infra]; !ok {
			t.Fatalf("docker-compose.yml has no %q service", infra)
		}
	}
	listening := map[string]map[string]bool{} // service -> ports it listens on
	ours := 0
	for name, s := range cf.Services {
		if s.Build == nil {
			continue
		}
		ours++
		if len(s.Command) == 0 {
			t.Errorf("service %s: no command", name)
			continue
		}
		c, ok := cmds[s.Command[0]]
		if !ok {
			t.Errorf("service %s: unknown command %q", name, s.Command[0])
			continue
		}
		flags := commandFlags(t, c)
		values := map[string]string{}
		for k, v := range flags {
			values[k] = v
		}
		for env, v := range s.Environment {
			if !strings.HasPrefix(env, "SWITCHYARD_") {
				continue
			}
			found := false
			for f := range flags {
				if cli.EnvName(f) == env {
					values[f], found = v, true
				}
			}
			if !found {
				t.Errorf("service %s: environment %s matches no flag of %s", name, env, c.Name)
			}
		}
		for _, arg := range s.Command[1:] {
			if !strings.HasPrefix(arg, "--") {
				t.Errorf("service %s: argument %q is not --flag=value", name, arg)
				continue
			}
			k, v, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
			if _, ok := flags[k]; !ok {
				t.Errorf("service %s: %s has no flag --%s", name, c.Name, k)
				continue
			}
			values[k] = v
		}
		// A gateway's drain, then its flush, fits before docker kills it
		// (its default grace is 10s).
		if c.Name == "gateway" {
			grace, err := time.ParseDuration(s.StopGracePeriod)
			drain, derr := time.ParseDuration(values["drain-timeout"])
			if err != nil || derr != nil || grace < drain+gatewaycmd.ExitAfterDrain {
				t.Errorf("service %s: stop_grace_period %q below --drain-timeout %s + %v", name, s.StopGracePeriod, values["drain-timeout"], gatewaycmd.ExitAfterDrain)
			}
		}
		// Everything that listens must be reachable: its port published
		// or exposed.
		ports := containerPorts(s)
		listening[name] = map[string]bool{}
		for _, f := range []string{"listen", "metrics-listen", "admin-listen"} {
			v, ok := values[f]
			if !ok || v == "" {
				continue
			}
			host, port, err := net.SplitHostPort(v)
			if err != nil {
				t.Errorf("service %s: --%s=%q: %v", name, f, v, err)
				continue
			}
			if host != "0.0.0.0" && host != "" {
				t.Errorf("service %s: --%s=%q listens on %s only: not reachable from other containers", name, f, v, host)
			}
			if !ports[port] {
				t.Errorf("service %s: --%s port %s is neither published nor exposed (%v)", name, f, port, ports)
			}
			listening[name][port] = true
		}
		if s.inProfile("cluster") || c.Name == "enginesim" {
			continue // on the clustered brokers (TestComposeCluster), or none
		}
		if v, ok := values["kafka-brokers"]; ok {
			for _, br := range strings.Split(v, ",") {
				host, port, err := net.SplitHostPort(br)
				if err != nil || host != "kafka" || port != "9092" {
					t.Errorf("service %s: --kafka-brokers=%q, want kafka:9092", name, v)
				}
			}
		}
		if v, ok := values["nats-url"]; ok {
			u, err := url.Parse(v)
			if err != nil || u.Hostname() != "nats" || u.Port() != "4222" {
				t.Errorf("service %s: --nats-url=%q, want nats://nats:4222", name, v)
			}
		}
	}
	if ours == 0 {
		t.Fatal("no service is built from deploy/Dockerfile")
	}

	pb, err := os.ReadFile("../../deploy/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	var pc promConfig
	if err := yaml.Unmarshal(pb, &pc); err != nil {
		t.Fatalf("parsing deploy/prometheus.yml: %v", err)
	}
	for _, sc := range pc.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				host, port, err := net.SplitHostPort(target)
				if err != nil {
					t.Errorf("prometheus target %q: %v", target, err)
					continue
				}
				if !listening[host][port] {
					t.Errorf("prometheus job %s scrapes %s, but service %q does not listen on %s", sc.JobName, target, host, port)
				}
			}
		}
	}
}

// TestComposeBrokers: Kafka and NATS have healthchecks and every service
// built from our Dockerfile waits for the brokers it uses (its
// SWITCHYARD_KAFKA_BROKERS and SWITCHYARD_NATS_URL) to be healthy; the
// simulated engines use none. Kafka advertises
// a listener that host clients reach on a published port (as the README's
// kcat -b 127.0.0.1:9092 needs) besides kafka:9092 for the services; its
// log directory is on the mounted volume.
func TestComposeBrokers(t *testing.T) {
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.Unmarshal(b, &cf); err != nil {
		t.Fatal(err)
	}
	for _, infra := range []string{"kafka", "nats"} {
		if hc := cf.Services[infra].Healthcheck; hc == nil || len(hc.Test) == 0 {
			t.Errorf("%s has no healthcheck", infra)
		}
	}
	for name, s := range cf.Services {
		if s.Build == nil {
			continue
		}
		uses := brokerHosts(t, s)
		if len(uses) == 0 {
			if len(s.Command) > 0 && s.Command[0] != "enginesim" && s.Command[0] != "keygen" {
				t.Errorf("service %s (%s) uses no broker", name, s.Command[0])
			}
			continue
		}
		deps, ok := s.DependsOn.(map[string]any)
		if !ok {
			t.Errorf("service %s: depends_on %v, want %v with condition service_healthy", name, s.DependsOn, uses)
			continue
		}
		for _, infra := range uses {
			if _, ok := cf.Services[infra]; !ok {
				t.Errorf("service %s uses broker %s, which is no service", name, infra)
			}
			d, _ := deps[infra].(map[string]any)
			if d["condition"] != "service_healthy" {
				t.Errorf("service %s: depends_on %s %v, want condition service_healthy", name, infra, deps[infra])
			}
		}
	}
	k := cf.Services["kafka"]
	published := map[string]string{} // container port -> host port
	for _, p := range k.Ports {
		if host, ctr, ok := strings.Cut(p, ":"); ok {
			published[ctr] = host
		}
	}
	listeners := map[string]string{} // name -> port
	for _, l := range strings.Split(k.Environment["KAFKA_LISTENERS"], ",") {
		if name, addr, ok := strings.Cut(l, "://"); ok {
			listeners[name] = strings.TrimPrefix(addr, ":")
		}
	}
	var internal, host bool
	for _, l := range strings.Split(k.Environment["KAFKA_ADVERTISED_LISTENERS"], ",") {
		name, addr, _ := strings.Cut(l, "://")
		h, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatalf("advertised listener %q: %v", l, err)
		}
		switch {
		case h == "kafka" && port == listeners[name]:
			internal = true
		case (h == "localhost" || h == "127.0.0.1") && published[listeners[name]] == port:
			host = true
		}
	}
	if !internal || !host {
		t.Errorf("kafka advertises %q on listeners %q published %v: want kafka:PORT for the services and localhost:PORT published to the host",
			k.Environment["KAFKA_ADVERTISED_LISTENERS"], k.Environment["KAFKA_LISTENERS"], k.Ports)
	}
	dir := k.Environment["KAFKA_LOG_DIRS"]
	mounted := false
	for _, v := range k.Volumes {
		if parts := strings.Split(v, ":"); len(parts) >= 2 && dir != "" && strings.HasPrefix(dir, parts[1]) {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("KAFKA_LOG_DIRS %q is not on a mounted volume %v", dir, k.Volumes)
	}
}

// brokerHosts returns the hosts of s's SWITCHYARD_KAFKA_BROKERS and
// SWITCHYARD_NATS_URL (and --kafka-brokers, --nats-url arguments).
func brokerHosts(t *testing.T, s composeService) []string {
	t.Helper()
	kafka, nats := s.Environment["SWITCHYARD_KAFKA_BROKERS"], s.Environment["SWITCHYARD_NATS_URL"]
	for _, arg := range s.Command {
		if v, ok := strings.CutPrefix(arg, "--kafka-brokers="); ok {
			kafka = v
		}
		if v, ok := strings.CutPrefix(arg, "--nats-url="); ok {
			nats = v
		}
	}
	var hosts []string
	for _, br := range splitList(kafka) {
		h, _, err := net.SplitHostPort(br)
		if err != nil {
			t.Errorf("kafka broker %q: %v", br, err)
			continue
		}
		hosts = append(hosts, h)
	}
	for _, u := range splitList(nats) {
		pu, err := url.Parse(u)
		if err != nil {
			t.Errorf("nats url %q: %v", u, err)
			continue
		}
		hosts = append(hosts, pu.Hostname())
	}
	return hosts
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
