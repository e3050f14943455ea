package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/agent"
	"github.com/switchyard-llm/switchyard/fleet"
)

// registryCommands are the commands that take --engine-registry and must
// get one in every deployment (docs/security.md#engine-registry).
var registryCommands = []string{"processor", "optimizer", "gateway"}

// registeredAs is how an engine must appear in a registry for an agent's
// signals to pass the processor: the agent's id, base URL (as the agent
// puts it in EndpointUrl, compared normalised), region and GPU class.
func registeredAs(ts []agent.Target) []string {
	var out []string
	for _, t := range ts {
		u := strings.TrimSuffix(strings.TrimRight(t.URL, "/"), "/metrics")
		out = append(out, fmt.Sprintf("%s %s %s %s", t.ID, fleet.Normalize(u), t.Region, t.GPUClass))
	}
	slices.Sort(out)
	return out
}

// registryEngines is registeredAs for the engines of a registry document.
func registryEngines(t *testing.T, where string, doc []byte) []string {
	t.Helper()
	reg, err := fleet.Parse(doc)
	if err != nil {
		t.Errorf("%s: engine registry: %v", where, err)
		return nil
	}
	var out []string
	for _, e := range reg.Engines() {
		out = append(out, fmt.Sprintf("%s %s %s %s", e.ID, e.URL, e.Region, e.GPUClass))
	}
	slices.Sort(out)
	return out
}

// agentTargets parses an agent's --engines value as the agent does.
func agentTargets(t *testing.T, where, engines, region, gpuClass string) []agent.Target {
	t.Helper()
	var specs []string
	for _, s := range strings.Split(engines, ";") {
		if s = strings.TrimSpace(s); s != "" {
			specs = append(specs, s)
		}
	}
	ts, err := agent.ParseTargets(specs, region, gpuClass)
	if err != nil || len(ts) == 0 {
		t.Errorf("%s: agent engines %q: %v", where, engines, err)
	}
	return ts
}

// checkEngineRegistry: every processor, optimizer and gateway of a
// rendered overlay runs with --engine-registry at a file of a ConfigMap
// mounted read-only, and that registry lists exactly the engines the
// overlay's agents scrape (ids, URLs, regions, classes): a registry
// missing one dead-letters its signals, one with more lets routing go
// where no agent looks.
func checkEngineRegistry(t *testing.T, r rendered) {
	t.Helper()
	var scraped []agent.Target
	var users []workload
	for _, w := range r.workloads(t) {
		c := w.template.Spec.Containers[0]
		switch cmd := c.Args[0]; {
		case cmd == "agent":
			env := r.envOf(t, w.String(), c)
			engines := argValue(c.Args, "engines")
			if engines == "" {
				engines = env["SWITCHYARD_ENGINES"]
			}
			scraped = append(scraped, agentTargets(t, w.String(), engines, env["SWITCHYARD_REGION"], env["SWITCHYARD_GPU_CLASS"])...)
		case slices.Contains(registryCommands, cmd):
			users = append(users, w)
		}
	}
	want := registeredAs(scraped)
	if len(want) == 0 || len(users) == 0 {
		t.Fatalf("%d engines scraped, %d workloads taking a registry", len(want), len(users))
	}
	for _, w := range users {
		where := w.String()
		spec := w.template.Spec
		c := spec.Containers[0]
		file := argValue(c.Args, "engine-registry")
		if file == "" {
			t.Errorf("%s: no --engine-registry", where)
			continue
		}
		var doc *string
		for _, m := range c.VolumeMounts {
			if m.MountPath != path.Dir(file) {
				continue
			}
			if !m.ReadOnly {
				t.Errorf("%s: engine registry mounted writable", where)
			}
			for _, v := range spec.Volumes {
				if v.Name != m.Name || v.ConfigMap == nil {
					continue
				}
				cm, ok := r.configMaps[v.ConfigMap.Name]
				if !ok {
					t.Errorf("%s: engine registry ConfigMap %s does not exist", where, v.ConfigMap.Name)
					continue
				}
				if d, ok := cm.Data[path.Base(file)]; ok {
					doc = &d
				}
			}
		}
		if doc == nil {
			t.Errorf("%s: --engine-registry=%s is not a file of a mounted ConfigMap", where, file)
			continue
		}
		if got := registryEngines(t, where, []byte(*doc)); !slices.Equal(got, want) {
			t.Errorf("%s: the registry lists\n%s\nthe agents scrape\n%s", where, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// checkComposeEngineRegistry: every processor, optimizer and gateway of
// docker-compose.yml runs with --engine-registry at a file of the repo
// mounted read-only, listing exactly the engines the agent of its
// profile scrapes.
func checkComposeEngineRegistry(t *testing.T, f composeFile) {
	t.Helper()
	scraped := map[bool][]string{} // by inProfile("cluster")
	for name, s := range f.Services {
		if len(s.Command) > 0 && s.Command[0] == "agent" {
			ha := s.inProfile("cluster")
			if scraped[ha] != nil {
				t.Fatalf("two agents in one profile (%s): the check compares with one", name)
			}
			scraped[ha] = registeredAs(agentTargets(t, name, argValue(s.Command, "engines"), argValue(s.Command, "region"), argValue(s.Command, "gpu-class")))
		}
	}
	users := 0
	for name, s := range f.Services {
		if len(s.Command) == 0 || !slices.Contains(registryCommands, s.Command[0]) {
			continue
		}
		users++
		file := argValue(s.Command, "engine-registry")
		if file == "" {
			t.Errorf("%s: no --engine-registry", name)
			continue
		}
		host := ""
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if len(parts) >= 2 && parts[1] == file {
				if len(parts) != 3 || parts[2] != "ro" {
					t.Errorf("%s: engine registry %s mounted writable", name, v)
				}
				host = parts[0]
			}
		}
		if !strings.HasPrefix(host, "./") {
			t.Errorf("%s: --engine-registry=%s is not a file of the repository mounted there (%v)", name, file, s.Volumes)
			continue
		}
		doc, err := os.ReadFile(filepath.Join("../..", host))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		want := scraped[s.inProfile("cluster")]
		if got := registryEngines(t, name, doc); len(want) == 0 || !slices.Equal(got, want) {
			t.Errorf("%s: the registry %s lists\n%s\nthe agent scrapes\n%s", name, host, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	if users == 0 {
		t.Fatal("no processor, optimizer or gateway")
	}
}
