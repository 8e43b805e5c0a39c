package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// cdiKind is the kind of NVIDIA's CDI specs for whole GPUs.
const cdiKind = "nvidia.com/gpu"

// CDISpecs returns a resolver naming a card's device in the NVIDIA CDI
// specs found in dirs (by index, else by UUID), and how many devices it
// knows. Unreadable or foreign specs are skipped.
func CDISpecs(dirs []string) (CDIResolver, int) {
	names := map[string]bool{}
	for _, dir := range dirs {
		files, _ := filepath.Glob(filepath.Join(dir, "*"))
		for _, f := range files {
			for _, n := range cdiDevices(f) {
				names[n] = true
			}
		}
	}
	resolve := func(c Card) string {
		for _, n := range []string{strconv.Itoa(c.Index), c.UUID} {
			if n != "" && names[n] {
				return cdiKind + "=" + n
			}
		}
		return ""
	}
	return resolve, len(names)
}

// cdiDevices lists the device names of one spec file of kind cdiKind.
func cdiDevices(path string) []string {
	if !strings.HasSuffix(path, ".json") && !strings.HasSuffix(path, ".yaml") {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var spec struct {
		Kind    string `json:"kind"`
		Devices []struct {
			Name string `json:"name"`
		} `json:"devices"`
	}
	if yaml.Unmarshal(b, &spec) != nil || spec.Kind != cdiKind {
		return nil
	}
	var out []string
	for _, d := range spec.Devices {
		out = append(out, d.Name)
	}
	return out
}

// RequireCDI checks that every card has a CDI device (cdi: always).
func RequireCDI(resolve CDIResolver, cards []Card, dirs []string) error {
	for _, c := range cards {
		if resolve(c) == "" {
			return fmt.Errorf("cdi: always, but no %s spec in %s names card %d (index or %s)",
				cdiKind, strings.Join(dirs, ", "), c.Index, c.UUID)
		}
	}
	return nil
}

// CgroupV2Root finds where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup
// on a unified host, /sys/fs/cgroup/unified on a hybrid one).
func CgroupV2Root() (string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		// ... mountpoint ... - fstype source options
		pre, post, ok := strings.Cut(line, " - ")
		f := strings.Fields(pre)
		if ok && len(f) >= 5 && strings.HasPrefix(post, "cgroup2 ") {
			return f[4], nil
		}
	}
	return "", fmt.Errorf("no cgroup v2 hierarchy is mounted: module mode and the eBPF guard identify containers by their cgroup v2 id")
}
