package kube

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"
)

// writeKubeconfig issues a client certificate for user in groups and
// writes a kubeconfig with it, for the API server, to path.
func (c *Cluster) writeKubeconfig(path, user string, groups ...string) error {
	certPEM, keyPEM, err := c.pki.issue(certSpec{cn: user, orgs: groups})
	if err != nil {
		return fmt.Errorf("kube: certificate for %s: %v", user, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["gpuslice-kube"] = &clientcmdapi.Cluster{
		Server:                   fmt.Sprintf("https://%s:%d", c.nodeIP, c.ports.APIServer),
		CertificateAuthorityData: c.pki.caPEM,
	}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts["gpuslice-kube"] = &clientcmdapi.Context{Cluster: "gpuslice-kube", AuthInfo: user}
	cfg.CurrentContext = "gpuslice-kube"
	return clientcmd.WriteToFile(*cfg, path)
}

var fileSafe = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// UserKubeconfig writes a kubeconfig for the user name in the given groups
// (a client certificate signed by the cluster CA: its CN and O) and
// returns its path: an identity with only the rights RBAC gives it, for
// a component under test that must hold no more (the node agent, a
// webhook). "system:serviceaccount:<ns>:<name>" is not a service account
// by certificate: bind roles to the user name.
func (c *Cluster) UserKubeconfig(user string, groups ...string) (string, error) {
	path := filepath.Join(c.dir, "users", fileSafe.ReplaceAllString(user, "_")+".kubeconfig")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	return path, c.writeKubeconfig(path, user, groups...)
}

// kubeletConfig is the KubeletConfiguration, serving with certFile and
// keyFile, trusting clients of caFile, on the CRI socket runtime, with
// opts.KubeletConfig's top-level keys over it.
func (c *Cluster) kubeletConfig(certFile, keyFile, caFile, runtime string) ([]byte, error) {
	cfg := map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1",
		"kind":       "KubeletConfiguration",
		// The node's address, not loopback (the kubelet refuses a loopback
		// node IP) and not every address.
		"address":            c.nodeIP,
		"port":               c.ports.Kubelet,
		"readOnlyPort":       0,
		"healthzBindAddress": "127.0.0.1",
		"healthzPort":        c.ports.KubeletHealthz,
		"tlsCertFile":        certFile,
		"tlsPrivateKeyFile":  keyFile,
		"rotateCertificates": false,
		"serverTLSBootstrap": false,
		// Only holders of certificates of the cluster CA (the API server)
		// reach the kubelet's API.
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": false},
			"x509":      map[string]any{"clientCAFile": caFile},
		},
		"authorization":            map[string]any{"mode": "AlwaysAllow"},
		"containerRuntimeEndpoint": "unix://" + runtime,
		"imageServiceEndpoint":     "unix://" + runtime,
		// containerd's runc runs with cgroupfs; the host is cgroup v1
		// hybrid, which 1.37 refuses unless told not to.
		"cgroupDriver":        "cgroupfs",
		"cgroupRoot":          c.cgroup,
		"cgroupsPerQOS":       true,
		"failCgroupV1":        false,
		"failSwapOn":          false,
		"podLogsDir":          filepath.Join(c.dir, "pod-logs"),
		"resolvConf":          "/etc/resolv.conf",
		"clusterDomain":       "cluster.local",
		"staticPodPath":       "",
		"registerNode":        true,
		"maxPods":             110,
		"serializeImagePulls": false,
		"shutdownGracePeriod": "0s",
		// A test machine's disk and memory are not the node's business:
		// no eviction or image garbage collection because the CI disk is
		// 85 % full.
		"evictionHard": map[string]string{
			"memory.available": "1Mi", "nodefs.available": "0%", "imagefs.available": "0%",
			"nodefs.inodesFree": "0%",
		},
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"nodeStatusUpdateFrequency":   "5s",
	}
	if c.opts.KubeletConfig != "" {
		var extra map[string]any
		if err := yaml.Unmarshal([]byte(c.opts.KubeletConfig), &extra); err != nil {
			return nil, fmt.Errorf("kube: Options.KubeletConfig: %v", err)
		}
		for k, v := range extra {
			cfg[k] = v
		}
	}
	return yaml.Marshal(cfg)
}

// cniConfig is the pods' network: a bridge (its own name, so a stale one
// is found and removed) with the host as gateway, addresses from the
// cluster's subnet, no masquerade (no iptables on the CI machines: pods
// reach the node's address, nothing beyond). The IPAM state is under the
// cluster's directory, not /var/lib/cni.
func (c *Cluster) cniConfig() ([]byte, error) {
	return json.MarshalIndent(map[string]any{
		"cniVersion": "1.0.0",
		"name":       "gpuslice-kube",
		"plugins": []any{map[string]any{
			"type":        "bridge",
			"bridge":      c.bridge,
			"isGateway":   true,
			"ipMasq":      false,
			"hairpinMode": false,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]string{{{"subnet": c.subnet}}},
				"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				"dataDir": filepath.Join(c.dir, "cni-ipam"),
			},
		}},
	}, "", "  ")
}
