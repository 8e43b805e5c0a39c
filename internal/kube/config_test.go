package kube

import (
	"net"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestKubeletConfigOverrides(t *testing.T) {
	tests := []struct {
		name    string
		extra   string
		key     string
		want    any    // the key's value in the result
		wantErr string // or the error
	}{
		{"defaults", "", "failCgroupV1", false, ""},
		{"the node's address, not every address", "", "address", "192.0.2.7", ""},
		{"an override wins", "maxPods: 50", "maxPods", float64(50), ""},
		{"a new key", "cpuManagerPolicy: static", "cpuManagerPolicy", "static", ""},
		{"bad YAML names the option", "maxPods: [", "", nil, "Options.KubeletConfig"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Cluster{nodeIP: "192.0.2.7", cgroup: "/gpuslice-kube-test", dir: "/x",
				opts: Options{KubeletConfig: tt.extra}}
			out, err := c.kubeletConfig("s.crt", "s.key", "ca.crt", "/run/c.sock")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := yaml.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			if got[tt.key] != tt.want {
				t.Errorf("%s = %#v, want %#v\n%s", tt.key, got[tt.key], tt.want, out)
			}
			if got["containerRuntimeEndpoint"] != "unix:///run/c.sock" {
				t.Errorf("containerRuntimeEndpoint = %v", got["containerRuntimeEndpoint"])
			}
		})
	}
}

func TestFreeSubnet(t *testing.T) {
	cidrs := func(ss ...string) []*net.IPNet {
		var ns []*net.IPNet
		for _, s := range ss {
			_, n, err := net.ParseCIDR(s)
			if err != nil {
				t.Fatal(err)
			}
			ns = append(ns, n)
		}
		return ns
	}
	tests := []struct {
		name string
		used []*net.IPNet
		want string // "" for none
	}{
		{"nothing used", nil, "10.251.0.0/24"},
		{"the host elsewhere", cidrs("192.0.2.0/24", "127.0.0.0/8"), "10.251.0.0/24"},
		{"the first taken", cidrs("10.251.0.0/24"), "10.251.1.0/24"},
		{"a host address inside the first", cidrs("10.251.0.77/32"), "10.251.1.0/24"},
		{"a wider net over all", cidrs("10.0.0.0/8"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := freeSubnet(tt.used)
			if tt.want == "" {
				if err == nil {
					t.Fatalf("got %s, want no subnet", got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %s (%v), want %s", got, err, tt.want)
			}
		})
	}
}
