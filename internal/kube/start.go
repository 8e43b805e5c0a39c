package kube

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuslice/gpuslice/internal/e2e"
)

// NodeName is the name the kubelet registers the node under.
const NodeName = "gpuslice-node"

// serviceCIDR is the Service ClusterIP range (nothing routes it: no
// kube-proxy; the API server's own Service takes its first address).
const serviceCIDR = "10.96.0.0/24"

// running is set while this process has a cluster: a second would wait
// for the host lock it holds itself.
var running struct {
	sync.Mutex
	yes bool
}

// Start starts a cluster for the test alone and registers its teardown,
// and the check that it left nothing behind, with t.Cleanup. It fails the
// test (with the components' logs) when anything does not come up. Tests
// of one package share a cluster with Main and Shared instead.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	Require(t)
	c, err := start(t, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// start brings a cluster up for tb's lifetime: everything it starts is
// undone by tb's cleanups, however far it gets.
func start(tb testing.TB, opts Options) (*Cluster, error) {
	began := time.Now()
	bin, err := Tools()
	if err != nil {
		return nil, err
	}
	if d := time.Since(began); d > 10*time.Second {
		tb.Logf("kube: building the tools took %.0f s (once per machine)", d.Seconds())
	}
	running.Lock()
	if running.yes {
		running.Unlock()
		return nil, fmt.Errorf("kube: this test process already runs a cluster; share it (Shared) rather than start another")
	}
	running.yes = true
	running.Unlock()
	host, err := lockHost(lockTimeout, tb.Logf)
	if err != nil {
		running.Lock()
		running.yes = false
		running.Unlock()
		return nil, err
	}
	if d := time.Since(began); d > 2*time.Second {
		tb.Logf("kube: waited %.0f s for the tools and the host lock", d.Seconds())
		began = time.Now()
	}
	sweepStale(tb.Logf)
	c, err := newCluster(tb, bin, opts, host)
	c.before = allSysctls()
	// From here on the last cleanup (the first registered) stops what is
	// left, sweeps the host, checks and releases the lock.
	tb.Cleanup(c.finish)
	if err != nil {
		return nil, err
	}
	if err := c.boot(began); err != nil {
		return nil, err
	}
	return c, nil
}

// newCluster lays out a cluster: its ID, directory, address, ports,
// subnet and names; it writes the owner file and starts nothing.
func newCluster(tb testing.TB, bin string, opts Options, host *hostLock) (*Cluster, error) {
	id := randomID()
	c := &Cluster{id: id, dir: filepath.Join(baseDir, id), bin: bin,
		cniBin: filepath.Join(filepath.Dir(bin), "cni"), opts: opts, tb: tb, node: NodeName,
		bridge: "gsk-" + id, cgroup: "/gpuslice-kube-" + id, host: host, procs: map[string]*proc{}}
	for _, d := range []string{"logs", "etcd", "kubelet", "cdi", "cni-ipam", "pod-logs", "pki"} {
		if err := os.MkdirAll(filepath.Join(c.dir, d), 0o755); err != nil {
			return c, err
		}
	}
	var err error
	if c.nodeIP, err = nodeIP(); err != nil {
		return c, err
	}
	if c.subnet, err = podSubnet(); err != nil {
		return c, err
	}
	ps, err := FreePorts(c.nodeIP, 7)
	if err != nil {
		return c, err
	}
	c.ports = ports{EtcdClient: ps[0], EtcdPeer: ps[1], APIServer: ps[2], Kubelet: ps[3],
		KubeletHealthz: ps[4], Scheduler: ps[5], ControllerManager: ps[6]}
	return c, c.writeOwner()
}

// boot starts the components in order and waits for the node to be
// Ready. containerd starts while the API server boots.
func (c *Cluster) boot(began time.Time) error {
	steps := []struct {
		what string
		do   func() error
	}{
		{"certificates", c.writePKI},
		{"etcd", c.startEtcd},
		{"kube-apiserver", c.startAPIServer},
		{"containerd", c.startContainerd},
		{"CNI", c.writeCNI},
		{"etcd ready", c.waitEtcd},
		{"kube-apiserver ready", c.waitAPIServer},
		{"kube-controller-manager", c.startControllerManager},
		{"kube-scheduler", c.startScheduler},
		{"kubelet", c.startKubelet},
		{"node Ready", c.waitNodeUp},
		{"controllers ready", c.waitControllers},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("kube: %s: %v\n%s", s.what, err, c.allLogs())
		}
	}
	c.tb.Logf("kube: cluster %s up in %.1f s (node %s at %s, API %s, dir %s)", c.id,
		time.Since(began).Seconds(), c.node, c.nodeIP, c.Server(), c.dir)
	return nil
}

// writePKI makes the CA, the service-account keys, every component's
// certificate and kubeconfig, and the admin client.
func (c *Cluster) writePKI() error {
	var err error
	if c.pki, err = newPKI(filepath.Join(c.dir, "pki")); err != nil {
		return err
	}
	kubeconfigs := []struct{ file, user, group string }{
		{"admin.kubeconfig", "gpuslice-admin", "system:masters"},
		{"controller-manager.kubeconfig", "system:kube-controller-manager", ""},
		{"scheduler.kubeconfig", "system:kube-scheduler", ""},
		{"kubelet.kubeconfig", "system:node:" + c.node, "system:nodes"},
	}
	for _, k := range kubeconfigs {
		var groups []string
		if k.group != "" {
			groups = []string{k.group}
		}
		if err := c.writeKubeconfig(filepath.Join(c.dir, k.file), k.user, groups...); err != nil {
			return err
		}
	}
	if c.config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig()); err != nil {
		return err
	}
	c.config.QPS, c.config.Burst = 100, 200
	c.client, err = kubernetes.NewForConfig(c.config)
	return err
}

func (c *Cluster) startEtcd() error {
	client := "http://127.0.0.1:" + strconv.Itoa(c.ports.EtcdClient)
	peer := "http://127.0.0.1:" + strconv.Itoa(c.ports.EtcdPeer)
	_, err := c.startProc("etcd",
		"--name=default", "--data-dir="+filepath.Join(c.dir, "etcd"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
		"--initial-cluster=default="+peer,
		// A test cluster's data dies with it: no fsync (slow CI disks).
		"--unsafe-no-fsync", "--log-level=warn")
	return err
}

// startAPIServer starts kube-apiserver on the node's address: Node and
// RBAC authorization, NodeRestriction, service-account tokens signed by
// the cluster's key, the kubelet dialled at its InternalIP with its
// serving certificate checked, and Services of webhooks routed to their
// endpoints (no kube-proxy routes ClusterIPs).
func (c *Cluster) startAPIServer() error {
	serving, servingKey, err := c.pki.issueFiles("apiserver", certSpec{
		cn: "kube-apiserver", server: true, ips: ipList(c.nodeIP, "127.0.0.1", "10.96.0.1"),
		dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
	})
	if err != nil {
		return err
	}
	kubeletClient, kubeletClientKey, err := c.pki.issueFiles("apiserver-kubelet-client",
		certSpec{cn: "kube-apiserver-kubelet-client"})
	if err != nil {
		return err
	}
	pki := c.pki.dir
	args := []string{
		"--etcd-servers=http://127.0.0.1:" + strconv.Itoa(c.ports.EtcdClient),
		"--bind-address=" + c.nodeIP, "--advertise-address=" + c.nodeIP,
		"--secure-port=" + strconv.Itoa(c.ports.APIServer),
		"--tls-cert-file=" + serving, "--tls-private-key-file=" + servingKey,
		"--client-ca-file=" + c.pki.caFile(),
		"--kubelet-client-certificate=" + kubeletClient, "--kubelet-client-key=" + kubeletClientKey,
		"--kubelet-certificate-authority=" + c.pki.caFile(),
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + filepath.Join(pki, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(pki, "sa.key"),
		"--service-cluster-ip-range=" + serviceCIDR,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		"--enable-aggregator-routing=true",
		"--profiling=false",
		"--v=2",
	}
	_, err = c.startProc("kube-apiserver", append(args, c.opts.APIServerArgs...)...)
	return err
}

// startContainerd starts the node's containerd (internal/e2e) with the
// cluster's CDI spec directory and its network namespaces under its
// state directory (so a teardown finds them).
func (c *Cluster) startContainerd() error {
	opts := c.opts.Containerd
	opts.RuntimeConfig = fmt.Sprintf("cdi_spec_dirs = [%q]\nnetns_mounts_under_state_dir = true\n%s",
		c.CDIDir(), opts.RuntimeConfig)
	c.env = e2e.Start(c.tb, opts)
	// The pods go first when the test ends, while containerd still runs:
	// registered after e2e.Start, this runs before its teardown.
	c.tb.Cleanup(c.teardown)
	return nil
}

// writeCNI puts the CNI plugins (links to the cache) and the bridge
// network into containerd's CNI directory, which it watches.
func (c *Cluster) writeCNI() error {
	dir := filepath.Join(c.env.Dir(), "cni")
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if err := os.Symlink(filepath.Join(c.cniBin, p), filepath.Join(dir, p)); err != nil {
			return err
		}
	}
	conf, err := c.cniConfig()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "10-gpuslice-kube.conflist"), conf, 0o644)
}

func (c *Cluster) startControllerManager() error {
	kc := filepath.Join(c.dir, "controller-manager.kubeconfig")
	args := []string{
		"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(c.ports.ControllerManager),
		"--leader-elect=false", "--use-service-account-credentials=true",
		"--service-account-private-key-file=" + filepath.Join(c.pki.dir, "sa.key"),
		"--root-ca-file=" + c.pki.caFile(),
		"--service-cluster-ip-range=" + serviceCIDR,
		"--controllers=*", "--profiling=false", "--v=2",
	}
	_, err := c.startProc("kube-controller-manager", append(args, c.opts.ControllerManagerArgs...)...)
	return err
}

func (c *Cluster) startScheduler() error {
	kc := filepath.Join(c.dir, "scheduler.kubeconfig")
	args := []string{
		"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(c.ports.Scheduler),
		"--leader-elect=false", "--profiling=false", "--v=2",
		// v1.37.2 counts a claim's consumed capacity twice while its
		// PreBind ends (e2e/cluster/schedrace): a pod filtered then
		// sees a full card one vGPU early, and no event retries it, so
		// it waits for this flush (5 min by default). 15 s keeps a card
		// filled by pods created at once within the tests' waits.
		"--pod-max-in-unschedulable-pods-duration=15s",
	}
	_, err := c.startProc("kube-scheduler", append(args, c.opts.SchedulerArgs...)...)
	return err
}

// startKubelet records the host's sysctls and the fixed paths the kubelet
// creates, then starts it. Its config and certificates are written once.
func (c *Cluster) startKubelet() error {
	c.saved = readSysctls(kubeletSysctls)
	for _, p := range kubeletHostPaths {
		if _, err := os.Lstat(p); os.IsNotExist(err) {
			c.created = append(c.created, p)
		}
	}
	if err := makeCgroupRoot(c.cgroup); err != nil {
		return err
	}
	if err := c.writeKubeletConfig(); err != nil {
		return err
	}
	return c.runKubelet()
}

// kubeletHostPaths are the paths the kubelet makes whatever its root
// directory: the device-plugin socket's (fixed), the container log links'
// (fixed).
var kubeletHostPaths = []string{"/var/lib/kubelet", "/var/lib/kubelet/device-plugins", "/var/log/containers"}

func (c *Cluster) writeKubeletConfig() error {
	cert, key, err := c.pki.issueFiles("kubelet-serving", certSpec{
		cn: "system:node:" + c.node, orgs: []string{"system:nodes"}, server: true,
		ips: ipList(c.nodeIP), dns: []string{c.node}})
	if err != nil {
		return err
	}
	cfg, err := c.kubeletConfig(cert, key, c.pki.caFile(), c.env.Address())
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.dir, "kubelet.yaml"), cfg, 0o644)
}

// runKubelet starts the kubelet with the config writeKubeletConfig wrote.
func (c *Cluster) runKubelet() error {
	args := []string{
		"--config=" + filepath.Join(c.dir, "kubelet.yaml"),
		"--kubeconfig=" + filepath.Join(c.dir, "kubelet.kubeconfig"),
		"--root-dir=" + c.KubeletRootDir(),
		"--cert-dir=" + filepath.Join(c.KubeletRootDir(), "pki"),
		"--hostname-override=" + c.node, "--node-ip=" + c.nodeIP,
		"--v=2",
	}
	if len(c.opts.NodeLabels) > 0 {
		var labels []string
		for _, k := range slices.Sorted(maps.Keys(c.opts.NodeLabels)) {
			labels = append(labels, k+"="+c.opts.NodeLabels[k])
		}
		args = append(args, "--node-labels="+strings.Join(labels, ","))
	}
	_, err := c.startProc("kubelet", append(args, c.opts.KubeletArgs...)...)
	return err
}

// allLogs is the tail of every component's log, for failure messages.
func (c *Cluster) allLogs() string {
	var b strings.Builder
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet"} {
		if _, err := os.Stat(c.LogPath(name)); err == nil {
			b.WriteString(c.Logs(name, 25) + "\n")
		}
	}
	if c.env != nil {
		b.WriteString(c.env.Logs())
	}
	return b.String()
}
