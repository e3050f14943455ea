package main

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	gatewaycmd "github.com/switchyard-llm/switchyard/services/gateway"
)

// Every deployed gateway spools the routing events Kafka cannot take
// (--event-spool-dir, docs/deploy.md#routing-event-spool), in a directory
// of its own on a writable volume larger than --event-spool-max-bytes.

// underMount reports whether dir is mountPath or inside it.
func underMount(dir, mountPath string) bool {
	return dir == mountPath || strings.HasPrefix(dir, strings.TrimSuffix(mountPath, "/")+"/")
}

// spoolMaxBytes is the gateway's --event-spool-max-bytes (its default
// when absent).
func spoolMaxBytes(t *testing.T, where string, args []string) int64 {
	t.Helper()
	v := argValue(args, "event-spool-max-bytes")
	if v == "" {
		return gatewaycmd.DefaultEventSpoolMaxBytes
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Errorf("%s: --event-spool-max-bytes=%q: %v", where, v, err)
	}
	return n
}

// checkGatewaySpool: the gateway's --event-spool-dir is on a writable
// mount of a volume that no other mount of the pod uses, that is the
// pod's own (an emptyDir, or a StatefulSet's volumeClaimTemplate; a
// claim named in a pod template is shared by its replicas), and whose
// size limit (or claimed storage) is above --event-spool-max-bytes.
func checkGatewaySpool(t *testing.T, r rendered, w workload, c corev1.Container) {
	t.Helper()
	where := w.String()
	dir := argValue(c.Args, "event-spool-dir")
	if dir == "" {
		t.Errorf("%s: no --event-spool-dir: routing events are lost while Kafka is down", where)
		return
	}
	maxBytes := spoolMaxBytes(t, where, c.Args)
	var mount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if underMount(dir, m.MountPath) && (mount == nil || len(m.MountPath) > len(mount.MountPath)) {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil {
		t.Errorf("%s: --event-spool-dir=%s is on no volume (the root filesystem is read-only)", where, dir)
		return
	}
	if mount.ReadOnly {
		t.Errorf("%s: --event-spool-dir=%s is on the read-only mount %s", where, dir, mount.Name)
	}
	for _, m := range c.VolumeMounts {
		if m.Name == mount.Name && m.MountPath != mount.MountPath {
			t.Errorf("%s: the spool's volume %s is mounted at %s too", where, mount.Name, m.MountPath)
		}
	}
	var limit *resource.Quantity
	for _, v := range w.template.Spec.Volumes {
		if v.Name != mount.Name {
			continue
		}
		switch {
		case v.EmptyDir != nil:
			if limit = v.EmptyDir.SizeLimit; limit == nil {
				t.Errorf("%s: the spool's emptyDir %s has no sizeLimit", where, v.Name)
			}
		case v.PersistentVolumeClaim != nil:
			t.Errorf("%s: the spool is on the claim %s, which every replica shares (the spool locks its directory)", where, v.PersistentVolumeClaim.ClaimName)
		default:
			t.Errorf("%s: the spool's volume %s is neither an emptyDir nor a claim of the pod's own", where, v.Name)
		}
		break
	}
	if ss, ok := r.stateful[w.name]; ok && w.kind == "StatefulSet" && limit == nil {
		for _, pvc := range ss.Spec.VolumeClaimTemplates {
			if pvc.Name == mount.Name {
				limit = pvc.Spec.Resources.Requests.Storage()
			}
		}
	}
	if limit == nil {
		t.Errorf("%s: the spool's volume %s has no size", where, mount.Name)
		return
	}
	if limit.Value() <= maxBytes {
		t.Errorf("%s: --event-spool-max-bytes=%d is not below the spool volume's %s (%d bytes): the volume fills first", where, maxBytes, limit, limit.Value())
	}
}

// checkComposeSpool: every gateway service's --event-spool-dir is on a
// writable named volume, declared, that no other service mounts (the
// spool locks its directory; two gateways never share one), in one
// container (deploy.replicas 1), at a path the image creates for the
// nonroot user (a new named volume takes the image's ownership).
func checkComposeSpool(t *testing.T, f composeFile) {
	t.Helper()
	dockerfile, err := os.ReadFile("../../deploy/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	users := map[string][]string{} // named volume -> services mounting it
	for name, s := range f.Services {
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			users[src] = append(users[src], name)
		}
	}
	for _, u := range users {
		slices.Sort(u)
	}
	gateways := 0
	for name, s := range f.Services {
		if len(s.Command) == 0 || s.Command[0] != "gateway" {
			continue
		}
		gateways++
		dir := argValue(s.Command, "event-spool-dir")
		if dir == "" {
			t.Errorf("%s: no --event-spool-dir: routing events are lost while Kafka is down", name)
			continue
		}
		spoolMaxBytes(t, name, s.Command)
		var src, target string
		ro := false
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if len(parts) >= 2 && underMount(dir, parts[1]) && len(parts[1]) > len(target) {
				src, target, ro = parts[0], parts[1], len(parts) == 3 && parts[2] == "ro"
			}
		}
		switch {
		case src == "":
			t.Errorf("%s: --event-spool-dir=%s is on no volume (lost with the container)", name, dir)
			continue
		case strings.ContainsAny(src[:1], "./~$"):
			t.Errorf("%s: the spool is on the bind mount %s, not a named volume", name, src)
		case ro:
			t.Errorf("%s: the spool's volume %s is read-only", name, src)
		}
		if _, ok := f.Volumes[src]; !ok {
			t.Errorf("%s: the spool's volume %s is not declared under volumes:", name, src)
		}
		if len(users[src]) != 1 {
			t.Errorf("%s: the spool's volume %s is mounted by %v; a spool needs a directory of its own", name, src, users[src])
		}
		if n := s.replicas(); n != 1 {
			t.Errorf("%s: %d replicas share the spool's volume %s", name, n, src)
		}
		if rel, ok := strings.CutPrefix(target, "/var/lib/switchyard/"); !ok || !strings.Contains(string(dockerfile), "/out/state/"+rel+" ") {
			t.Errorf("%s: the spool's mount %s is not a directory deploy/Dockerfile creates for the nonroot user (/var/lib/switchyard/...)", name, target)
		}
	}
	if gateways == 0 {
		t.Fatal("no gateway services")
	}
}
