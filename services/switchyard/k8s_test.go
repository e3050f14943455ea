package main

import (
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/switchyard-llm/switchyard/agent"
	"github.com/switchyard-llm/switchyard/internal/cli"
	gatewaycmd "github.com/switchyard-llm/switchyard/services/gateway"
)

// rendered is one overlay's objects, each strictly decoded into its
// Kubernetes API type.
type rendered struct {
	deployments map[string]*appsv1.Deployment
	stateful    map[string]*appsv1.StatefulSet
	services    map[string]*corev1.Service
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	hpas        map[string]*autoscalingv2.HorizontalPodAutoscaler
	pdbs        map[string]*policyv1.PodDisruptionBudget
	namespaces  map[string]*corev1.Namespace
	netpols     map[string]*networkingv1.NetworkPolicy
	jobs        map[string]*batchv1.Job
}

// render runs kustomize on dir (as kubectl apply -k does) and decodes
// every object into its API type with unknown fields disallowed.
func render(t *testing.T, dir string) rendered {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	r := rendered{
		deployments: map[string]*appsv1.Deployment{}, services: map[string]*corev1.Service{},
		stateful:   map[string]*appsv1.StatefulSet{},
		configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{},
		hpas: map[string]*autoscalingv2.HorizontalPodAutoscaler{}, pdbs: map[string]*policyv1.PodDisruptionBudget{},
		namespaces: map[string]*corev1.Namespace{}, netpols: map[string]*networkingv1.NetworkPolicy{},
		jobs: map[string]*batchv1.Job{},
	}
	for _, res := range m.Resources() {
		b, err := res.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		where := fmt.Sprintf("%s: %s %s %s", dir, res.GetApiVersion(), res.GetKind(), res.GetName())
		var (
			name string
			derr error
		)
		switch res.GetApiVersion() + " " + res.GetKind() {
		case "apps/v1 Deployment":
			name, derr = decodeInto(b, r.deployments)
		case "apps/v1 StatefulSet":
			name, derr = decodeInto(b, r.stateful)
		case "v1 Service":
			name, derr = decodeInto(b, r.services)
		case "v1 ConfigMap":
			name, derr = decodeInto(b, r.configMaps)
		case "v1 Secret":
			name, derr = decodeInto(b, r.secrets)
		case "autoscaling/v2 HorizontalPodAutoscaler":
			name, derr = decodeInto(b, r.hpas)
		case "policy/v1 PodDisruptionBudget":
			name, derr = decodeInto(b, r.pdbs)
		case "v1 Namespace":
			name, derr = decodeInto(b, r.namespaces)
		case "networking.k8s.io/v1 NetworkPolicy":
			name, derr = decodeInto(b, r.netpols)
		case "batch/v1 Job":
			name, derr = decodeInto(b, r.jobs)
		default:
			t.Errorf("%s: not a kind and version this test knows", where)
			continue
		}
		if derr != nil {
			t.Errorf("%s does not decode strictly into its API type: %v", where, derr)
		} else if name != res.GetName() {
			t.Errorf("%s decodes with name %q", where, name)
		}
	}
	return r
}

// decodeInto decodes b into a new T with unknown fields disallowed and
// files it in m under its name.
func decodeInto[T any, PT interface {
	*T
	GetName() string
}](b []byte, m map[string]PT) (string, error) {
	obj := PT(new(T))
	if err := yaml.UnmarshalStrict(b, obj); err != nil {
		return "", err
	}
	m[obj.GetName()] = obj
	return obj.GetName(), nil
}

// envOf resolves a container's environment from the rendered ConfigMaps
// and Secrets (a Secret's empty placeholders included).
func (r rendered) envOf(t *testing.T, where string, c corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm, ok := r.configMaps[from.ConfigMapRef.Name]
			if !ok {
				t.Errorf("%s: envFrom ConfigMap %s does not exist", where, from.ConfigMapRef.Name)
				continue
			}
			for k, v := range cm.Data {
				env[k] = v
			}
		case from.SecretRef != nil:
			s, ok := r.secrets[from.SecretRef.Name]
			if keys, required := operatorSecrets[from.SecretRef.Name]; !ok && required {
				// Created by the operator (docs/deploy.md#credentials):
				// its documented keys, with placeholder values.
				for _, k := range keys {
					env[k] = "<" + from.SecretRef.Name + ">"
				}
			} else if !ok && (from.SecretRef.Optional == nil || !*from.SecretRef.Optional) {
				t.Errorf("%s: envFrom Secret %s does not exist", where, from.SecretRef.Name)
			}
			if ok {
				for k, v := range s.StringData {
					env[k] = v
				}
				for k, v := range s.Data {
					env[k] = string(v)
				}
			}
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			var v string
			cm, ok := r.configMaps[ref.Name]
			has := false
			if ok {
				v, has = cm.Data[ref.Key]
			}
			if !has {
				t.Errorf("%s: env %s: ConfigMap %s has no key %s", where, e.Name, ref.Name, ref.Key)
			}
			env[e.Name] = v
		case e.ValueFrom.FieldRef != nil:
			// The downward API: the value is the pod's field, written
			// {path} here.
			env[e.Name] = "{" + e.ValueFrom.FieldRef.FieldPath + "}"
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			var v string
			s, ok := r.secrets[ref.Name]
			has := false
			if ok {
				v, has = s.StringData[ref.Key]
			} else if keys, required := operatorSecrets[ref.Name]; required && slices.Contains(keys, ref.Key) {
				v, has = "<"+ref.Name+">", true
			}
			if !has && (ref.Optional == nil || !*ref.Optional) {
				t.Errorf("%s: env %s: Secret %s has no key %s", where, e.Name, ref.Name, ref.Key)
			}
			env[e.Name] = v
		default:
			t.Errorf("%s: env %s: unsupported source", where, e.Name)
		}
	}
	return env
}

// portOf returns the container port a probe's port names.
func portOf(c corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// workload is a Deployment or a StatefulSet that runs Switchyard.
type workload struct {
	kind, name, namespace string
	replicas              *int32
	selector              *metav1.LabelSelector
	template              corev1.PodTemplateSpec
	// strategy is a Deployment's.
	strategy appsv1.DeploymentStrategyType
}

func (w workload) String() string { return w.kind + " " + w.name }

// count is the workload's replicas, "unset" when not given.
func (w workload) count() string {
	if w.replicas == nil {
		return "unset"
	}
	return strconv.Itoa(int(*w.replicas))
}

// switchyardImage is the image every Switchyard workload runs.
const switchyardImage = "ghcr.io/switchyard-llm/switchyard:"

// workloads are every Deployment and the StatefulSets that run
// Switchyard (not the brokers' ones), by name.
func (r rendered) workloads(t *testing.T) map[string]workload {
	t.Helper()
	out := map[string]workload{}
	for name, d := range r.deployments {
		out[name] = workload{kind: "Deployment", name: name, namespace: d.Namespace, replicas: d.Spec.Replicas,
			selector: d.Spec.Selector, template: d.Spec.Template, strategy: d.Spec.Strategy.Type}
	}
	for name, ss := range r.stateful {
		if cs := ss.Spec.Template.Spec.Containers; len(cs) == 0 || !strings.HasPrefix(cs[0].Image, switchyardImage) {
			continue
		}
		if _, dup := out[name]; dup {
			t.Errorf("a Deployment and a StatefulSet are both named %s", name)
		}
		out[name] = workload{kind: "StatefulSet", name: name, namespace: ss.Namespace, replicas: ss.Spec.Replicas,
			selector: ss.Spec.Selector, template: ss.Spec.Template}
	}
	return out
}

// expandArg expands $(VAR) references to env as Kubernetes expands them
// in a container's arguments.
func expandArg(arg string, env map[string]string) string {
	for k, v := range env {
		arg = strings.ReplaceAll(arg, "$("+k+")", v)
	}
	return arg
}

// TestKustomize renders every overlay of deploy/k8s with kustomize,
// decodes each object strictly into its k8s.io/api type, and checks that
// each container runs a real command with real flags (arguments and
// SWITCHYARD_* variables from its ConfigMaps and Secrets), listens where
// its ports and probes point (/health/ready for gateways, /health for the
// rest), that selectors, Services, HPAs and PDBs find their pods, that the
// optimizer runs as a pair, the processor as one pod never doubled, the
// gateways scale with an HPA, and that Kafka and NATS are external
// Services. The three-region-ha overlay processes partitioned: a
// StatefulSet of three `processor --mode partitioned` instances, each a
// static member named after its pod, and one combiner never doubled,
// with the instances' window settings and group (checkPartitioned).
func TestKustomize(t *testing.T) {
	cmds := map[string]cli.Command{}
	for _, c := range commands() {
		cmds[c.Name] = c
	}
	flagsOf := map[string]map[string]string{}
	for _, overlay := range []struct {
		dir      string
		regions  []string
		gateways int
		brokers  bool // Kafka and NATS clustered in the namespace
		// partitioned: processor instances and a combiner instead of the
		// single processor.
		partitioned bool
	}{
		{"one-region", []string{"region-a"}, 1, false, false},
		{"three-region", []string{"region-a", "region-b", "region-c"}, 3, false, false},
		{"three-region-ha", []string{"region-a", "region-b", "region-c"}, 3, true, true},
	} {
		t.Run(overlay.dir, func(t *testing.T) {
			r := render(t, filepath.Join("../../deploy/k8s/overlays", overlay.dir))
			valuesOf := map[string]map[string]string{} // Deployment -> flag values
			if overlay.brokers {
				defer func() { checkClusteredBrokers(t, r, valuesOf) }()
			}
			all := r.workloads(t)
			for name := range r.stateful {
				if _, ok := all[name]; !ok && !overlay.brokers {
					t.Errorf("StatefulSet %s: brokers are external in this overlay", name)
				}
			}
			if len(r.namespaces) != 1 {
				t.Errorf("%d namespaces, want 1", len(r.namespaces))
			}
			byComponent := map[string][]workload{}
			for name, d := range all {
				where := d.String()
				if d.namespace != "switchyard" {
					t.Errorf("%s: namespace %q", where, d.namespace)
				}
				sel, err := metav1.LabelSelectorAsSelector(d.selector)
				if err != nil || !sel.Matches(labels.Set(d.template.Labels)) {
					t.Errorf("%s: selector %v does not select its pods %v", where, d.selector, d.template.Labels)
				}
				if len(d.template.Spec.Containers) != 1 {
					t.Fatalf("%s: %d containers", where, len(d.template.Spec.Containers))
				}
				c := d.template.Spec.Containers[0]
				if !strings.HasPrefix(c.Image, switchyardImage) {
					t.Errorf("%s: image %q", where, c.Image)
				}
				if len(c.Args) == 0 {
					t.Fatalf("%s: no command", where)
				}
				cmd, ok := cmds[c.Args[0]]
				if !ok {
					t.Fatalf("%s: unknown command %q", where, c.Args[0])
				}
				byComponent[cmd.Name] = append(byComponent[cmd.Name], d)
				if flagsOf[cmd.Name] == nil {
					flagsOf[cmd.Name] = commandFlags(t, cmd)
				}
				flags := flagsOf[cmd.Name]
				values := map[string]string{}
				for k, v := range flags {
					values[k] = v
				}
				env := r.envOf(t, where, c)
				for k, v := range env {
					if strings.HasPrefix(k, "OTEL_") {
						continue
					}
					if !strings.HasPrefix(k, "SWITCHYARD_") {
						// A variable the arguments refer to ($(POD_NAME)).
						if !slices.ContainsFunc(c.Args, func(a string) bool { return strings.Contains(a, "$("+k+")") }) {
							t.Errorf("%s: variable %s is no flag of %s and no argument refers to it", where, k, cmd.Name)
						}
						continue
					}
					found := false
					for f := range flags {
						if cli.EnvName(f) == k {
							values[f], found = v, true
						}
					}
					if !found {
						t.Errorf("%s: variable %s is no flag of %s", where, k, cmd.Name)
					}
				}
				for _, arg := range c.Args[1:] {
					arg = expandArg(arg, env)
					if strings.Contains(arg, "$(") {
						t.Errorf("%s: argument %q refers to a variable the container does not have", where, arg)
					}
					k, v, ok := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
					if !strings.HasPrefix(arg, "--") || !ok {
						t.Errorf("%s: argument %q is not --flag=value", where, arg)
						continue
					}
					if _, ok := flags[k]; !ok {
						t.Errorf("%s: %s has no flag --%s", where, cmd.Name, k)
					}
					values[k] = v
				}
				values[""] = cmd.Name
				valuesOf[name] = values
				// Kafka and NATS are cluster Services.
				for _, br := range strings.Split(values["kafka-brokers"], ",") {
					if _, ok := flags["kafka-brokers"]; ok && !strings.Contains(br, ".svc:") {
						t.Errorf("%s: --kafka-brokers=%q is not a cluster Service", where, values["kafka-brokers"])
					}
				}
				if _, ok := flags["nats-url"]; ok && !strings.Contains(values["nats-url"], ".svc:") {
					t.Errorf("%s: --nats-url=%q is not a cluster Service", where, values["nats-url"])
				}
				// It listens where its ports and probes point.
				listen := values["metrics-listen"]
				probePath := "/health"
				if cmd.Name == "gateway" {
					listen, probePath = values["listen"], "/health/ready"
					if values["admin-listen"] != "" {
						listen = values["admin-listen"]
					}
				}
				host, port, err := net.SplitHostPort(listen)
				if err != nil || (host != "0.0.0.0" && host != "") {
					t.Errorf("%s: listens on %q, not reachable from other pods", where, listen)
				}
				want, _ := strconv.Atoi(port)
				for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
					if p == nil || p.HTTPGet == nil {
						t.Errorf("%s: no HTTP %s probe", where, name)
						continue
					}
					if got, ok := portOf(c, p.HTTPGet.Port); !ok || int(got) != want {
						t.Errorf("%s: %s probe on port %v, the command listens on %s", where, name, p.HTTPGet.Port.String(), listen)
					}
					if name == "readiness" && p.HTTPGet.Path != probePath {
						t.Errorf("%s: readiness probe on %s, want %s", where, p.HTTPGet.Path, probePath)
					}
				}
				// The values themselves parse as the commands parse them.
				switch cmd.Name {
				case "gateway":
					getenv := func(k string) string { return env[k] }
					gf, err := gatewaycmd.ParseFlags(c.Args[1:], getenv)
					if err != nil {
						t.Errorf("%s: the gateway refuses its configuration: %v", where, err)
					}
					// The kubelet kills the pod at the grace period: the
					// drain, then the routing events' flush, must fit.
					grace := time.Duration(30) * time.Second // Kubernetes' default
					if g := d.template.Spec.TerminationGracePeriodSeconds; g != nil {
						grace = time.Duration(*g) * time.Second
					}
					if grace < gf.DrainTimeout+gatewaycmd.ExitAfterDrain {
						t.Errorf("%s: terminationGracePeriodSeconds %v below --drain-timeout %v + %v", where, grace, gf.DrainTimeout, gatewaycmd.ExitAfterDrain)
					}
				case "agent":
					var specs []string
					for _, s := range strings.Split(values["engines"], ";") {
						if s = strings.TrimSpace(s); s != "" {
							specs = append(specs, s)
						}
					}
					if _, err := agent.ParseTargets(specs, values["region"], values["gpu-class"]); err != nil || len(specs) == 0 {
						t.Errorf("%s: agent engines %q: %v", where, values["engines"], err)
					}
				}
			}
			combiners := 0
			if overlay.partitioned {
				combiners = 1
			}
			for comp, n := range map[string]int{"gateway": overlay.gateways, "agent": len(overlay.regions), "processor": 1, "optimizer": 1, "combiner": combiners} {
				if len(byComponent[comp]) != n {
					t.Errorf("%d %s workloads, want %d", len(byComponent[comp]), comp, n)
				}
			}
			for _, d := range byComponent["optimizer"] {
				if d.replicas == nil || *d.replicas != 2 {
					t.Errorf("%s: replicas %s, want an active/standby pair of 2", d, d.count())
				}
			}
			if overlay.partitioned {
				checkPartitioned(t, byComponent, valuesOf)
			} else {
				// One processor, never two at once (see processor.yaml).
				for _, d := range byComponent["processor"] {
					if d.kind != "Deployment" || d.replicas == nil || *d.replicas != 1 || d.strategy != appsv1.RecreateDeploymentStrategyType || valuesOf[d.name]["mode"] != "single" {
						t.Errorf("%s: replicas %s, strategy %s, --mode=%s; want a Deployment of 1 replica, Recreate, single", d, d.count(), d.strategy, valuesOf[d.name]["mode"])
					}
				}
			}
			if o := byComponent["optimizer"]; len(o) == 1 {
				env := r.envOf(t, o[0].name, o[0].template.Spec.Containers[0])
				if got := strings.Split(env["SWITCHYARD_CLUSTERS"], ","); !slices.Equal(got, overlay.regions) {
					t.Errorf("optimizer plans for %v, want %v", got, overlay.regions)
				}
			}

			// Every gateway has an HPA; every Deployment with more than one
			// pod has a PDB selecting exactly its pods; every Service finds
			// pods and a named port.
			scaled := map[string]bool{}
			for name, h := range r.hpas {
				ref := h.Spec.ScaleTargetRef
				d, ok := r.deployments[ref.Name]
				if ref.Kind != "Deployment" || !ok {
					t.Errorf("HPA %s scales %s %s, which does not exist", name, ref.Kind, ref.Name)
					continue
				}
				scaled[d.Name] = true
				if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 || h.Spec.MaxReplicas < *h.Spec.MinReplicas {
					t.Errorf("HPA %s: replicas %v..%d", name, h.Spec.MinReplicas, h.Spec.MaxReplicas)
				}
				if c := d.Spec.Template.Spec.Containers[0]; c.Resources.Requests.Cpu().IsZero() {
					t.Errorf("HPA %s scales on CPU but %s requests none", name, d.Name)
				}
			}
			for _, d := range byComponent["gateway"] {
				if !scaled[d.name] {
					t.Errorf("gateway %s has no HPA", d.name)
				}
			}
			for name, d := range all {
				if (d.replicas == nil || *d.replicas < 2) && !scaled[name] {
					continue
				}
				n := 0
				for _, p := range r.pdbs {
					sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
					if err != nil {
						t.Fatal(err)
					}
					if sel.Matches(labels.Set(d.template.Labels)) {
						n++
						for other, od := range all {
							if other != name && sel.Matches(labels.Set(od.template.Labels)) {
								t.Errorf("PDB %s selects the pods of %s and %s", p.Name, name, other)
							}
						}
					}
				}
				if n != 1 {
					t.Errorf("%s: %d PodDisruptionBudgets, want 1", name, n)
				}
			}
			templates := map[string]corev1.PodTemplateSpec{}
			for name, d := range r.deployments {
				templates[name] = d.Spec.Template
			}
			for name, ss := range r.stateful {
				templates[name] = ss.Spec.Template
			}
			for name, s := range r.services {
				found := false
				for dname, tmpl := range templates {
					if labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(tmpl.Labels)) {
						found = true
						for _, p := range s.Spec.Ports {
							if _, ok := portOf(tmpl.Spec.Containers[0], p.TargetPort); !ok {
								t.Errorf("Service %s: target port %s is no port of %s", name, p.TargetPort.String(), dname)
							}
						}
					}
				}
				if !found {
					t.Errorf("Service %s selects no pods", name)
				}
			}
		})
	}
}

// checkPartitioned checks partitioned processing: the processor a
// StatefulSet of three `--mode partitioned` instances, each with its pod's
// name as --instance-id (static membership: a replaced pod takes its
// partitions back at once), and one combiner (a Deployment of 1 replica,
// Recreate: two would each publish every window), the combiner reading
// the instances' group with the same window settings.
func checkPartitioned(t *testing.T, byComponent map[string][]workload, valuesOf map[string]map[string]string) {
	t.Helper()
	procs, combs := byComponent["processor"], byComponent["combiner"]
	if len(procs) != 1 || len(combs) != 1 {
		t.Fatalf("processors %v, combiners %v: want one of each", procs, combs)
	}
	p, c := procs[0], combs[0]
	pv, cv := valuesOf[p.name], valuesOf[c.name]
	if p.kind != "StatefulSet" || p.replicas == nil || *p.replicas != 3 {
		t.Errorf("%s: replicas %s, want a StatefulSet of 3 instances", p, p.count())
	}
	if pv["mode"] != "partitioned" {
		t.Errorf("%s: --mode=%s, want partitioned", p, pv["mode"])
	}
	if pv["instance-id"] != "{metadata.name}" {
		t.Errorf("%s: --instance-id=%q, want the pod's name ($(POD_NAME) from metadata.name)", p, pv["instance-id"])
	}
	if c.kind != "Deployment" || c.replicas == nil || *c.replicas != 1 || c.strategy != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("%s: replicas %s, strategy %s; want a Deployment of 1 replica, Recreate", c, c.count(), c.strategy)
	}
	for _, f := range []string{"group", "window", "slide", "allowed-lateness", "topic-prefix", "kafka-brokers"} {
		if pv[f] != cv[f] {
			t.Errorf("--%s: the instances say %q, the combiner %q; they must agree", f, pv[f], cv[f])
		}
	}
}
