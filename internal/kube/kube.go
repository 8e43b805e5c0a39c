// Package kube runs a real single-node Kubernetes for the end-to-end tests
// of gpuslice's Kubernetes integration: etcd v3.6.16, kube-apiserver,
// kube-controller-manager, kube-scheduler and a kubelet of Kubernetes
// v1.37.2, built once per machine by nri-plugin/e2e/kube-tools.sh into a
// cache outside the clone, the kubelet on a containerd of internal/e2e
// (CRI, NRI, CDI) with a CNI bridge. Nothing is mocked: the scheduler that
// binds a pod, the claim controller, the API server's admission and CEL
// are the released code.
//
// A test package shares one control plane between its tests (start-up
// takes about 10 s, a cold tools build 10-15 minutes):
//
//	func TestMain(m *testing.M) { os.Exit(kube.Main(m, kube.Options{})) }
//
//	func TestX(t *testing.T) {
//		c := kube.Shared(t) // started by the first test that asks
//		ns := c.Namespace(t) // a fresh namespace, emptied when t ends
//		...
//	}
//
// Main tears the cluster down after the tests and then checks that nothing
// is left behind (processes, mounts, cgroups, the bridge, host sysctls,
// files); leftovers fail the test binary. Start gives one test a cluster of
// its own instead, torn down and checked when the test ends.
//
// What a scenario gets: an admin Client, RESTConfig, Kubeconfig, Kubectl
// and Apply; UserKubeconfig, an identity with only what RBAC grants;
// NodeName and NodeIP; Containerd, to start an NRI plugin that sees the
// kubelet's containers; KubeletRootDir, PluginRegistryDir, PluginsDir and
// CDIDir, where a DRA driver registers, keeps its socket and writes CDI
// specs; ServingCert and CACert, a webhook's TLS material; waits
// (WaitNodeReady, WaitPodRunning, WaitPodUnschedulable with the
// scheduler's message, WaitEvent, WaitPodGone, WaitPod) and DescribePod
// for failure messages; RestartKubelet (StopKubelet, StartKubelet) with
// pods running; Namespace, BusyboxPod, CreatePod, DeletePod, Exec. Pods
// use Image, which is also containerd's sandbox image (a static /pause).
//
// The teardown deletes the pods through the API before it stops the
// kubelet, so that a DRA driver still running unprepares their claims as
// on a drained node: stop such a driver only after its pods are gone, or
// the teardown waits for them (90 s) before containerd's removes them.
//
// The tests need root. They skip only when GPUSLICE_SKIP_KUBE=1 (or
// internal/e2e's GPUSLICE_SKIP_E2E=1: the kubelet runs on its containerd);
// without root and without either they fail, saying so.
//
// One cluster runs on a machine at a time: it holds a host-wide lock
// (/var/lib/gpuslice-kube/host.lock) from start to the end of its
// teardown, so test packages that go test runs in parallel take turns.
// Why: the kubelet changes host-wide sysctls and owns a fixed device-plugin
// socket, so overlapping clusters could not each restore what they found;
// and two control planes on a 2-core machine would slow each other down
// more than waiting does.
//
// Everything a cluster writes is under /var/lib/gpuslice-kube/<id> (short
// paths: kubelet plugins put unix sockets there), except containerd's
// files (internal/e2e's layout). A test process that dies without its
// teardown (a go test timeout) leaves its directory and owner file behind,
// and the next Start on the machine cleans up after it.
//
// Why each setting is as it is: shared/spec/test-infrastructure.md ("A
// real single-node Kubernetes"): failCgroupV1 false (cgroup v1 hybrid
// hosts), the kubelet on the node's non-loopback address with that address
// in its serving certificate and --kubelet-preferred-address-types=
// InternalIP, the sysctls the kubelet changes recorded and restored, the
// API server's second SIGTERM. DRAConsumableCapacity is beta and on by
// default in v1.37 (since v1.36) and ValidatingAdmissionPolicy is GA (its
// gate no longer exists): no feature gate is named.
package kube

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpuslice/gpuslice/internal/e2e"
)

// SkipVar is the environment variable that, set to 1, skips the tests that
// need a real Kubernetes. e2e.SkipVar skips them too.
const SkipVar = "GPUSLICE_SKIP_KUBE"

// Image is the image pods use: internal/e2e's busybox image, imported
// into the node's containerd (pods must say imagePullPolicy: Never, or
// the kubelet tries a registry). Its default command, /pause, idles.
const Image = e2e.Image

// Waits, generous for a loaded 2-core machine: they bound polling, they are
// never slept through.
const (
	toolsTimeout = 40 * time.Minute // a cold kube-tools.sh takes 10-15 minutes
	// Another package's cluster's whole run (2-4 minutes here). Under
	// make test's 30-minute package timeout, so that a wait that long
	// ends in this package's message, not in go test's panic.
	lockTimeout    = 20 * time.Minute
	upTimeout      = 90 * time.Second // one component healthy
	nodeTimeout    = 2 * time.Minute  // the node registered and Ready
	stopTimeout    = 20 * time.Second // a process's grace after SIGTERM
	drainTimeout   = 90 * time.Second // the pods gone in a teardown
	kubectlTimeout = 2 * time.Minute  // one kubectl command
)

// baseDir holds every cluster's directory, the owner files in them and the
// host lock.
const baseDir = "/var/lib/gpuslice-kube"

// Options adjusts a cluster. The zero value is a cluster with nothing
// extra.
type Options struct {
	// Containerd adjusts the node's containerd (pre-registered NRI plugins,
	// their configs, timeouts). The cluster adds its CDI spec directory
	// and its network namespaces' place to RuntimeConfig.
	Containerd e2e.Options
	// APIServerArgs, ControllerManagerArgs, SchedulerArgs and KubeletArgs
	// are extra command-line flags, after the cluster's own (a repeated
	// flag overrides).
	APIServerArgs         []string
	ControllerManagerArgs []string
	SchedulerArgs         []string
	KubeletArgs           []string
	// KubeletConfig is YAML merged, key by key at the top level, over the
	// cluster's KubeletConfiguration (for example "maxPods: 50").
	KubeletConfig string
	// NodeLabels are the node's labels from its kubelet (--node-labels),
	// for example the reference's accelerator: nvidia-tesla-t4.
	NodeLabels map[string]string
}

// Cluster is one running control plane and node. Its methods may be called
// from several goroutines.
type Cluster struct {
	id     string
	dir    string // baseDir/<id>
	bin    string // the Kubernetes and etcd binaries
	cniBin string // the CNI plugins
	opts   Options
	tb     testing.TB // the cluster's lifetime: a test, or Main's
	nodeIP string
	node   string
	ports  ports
	subnet string // the pods' subnet
	bridge string // the CNI bridge's name
	cgroup string // the kubelet's cgroup root, "/gpuslice-kube-<id>"

	pki    *pki
	env    *e2e.Env
	client kubernetes.Interface
	config *rest.Config
	host   *hostLock
	saved  sysctls // the host's values before the kubelet changed them
	before sysctls // all of /proc/sys before the cluster started
	// created are the host paths the kubelet makes that were not there.
	created []string
	ending  time.Time // when the teardown began

	mu     sync.Mutex
	procs  map[string]*proc // by component name
	nsSeq  int
	kubeMu sync.Mutex // serializes kubelet stops and starts
}

// ports are the TCP ports the components listen on.
type ports struct {
	EtcdClient, EtcdPeer, APIServer, Kubelet, KubeletHealthz, Scheduler, ControllerManager int
}

// ID is the cluster's identifier, unique on the machine.
func (c *Cluster) ID() string { return c.id }

// Dir is the cluster's directory: pki/, etcd/, logs/ (one file per
// component), kubelet/ (the kubelet's root), cdi/, the kubeconfigs.
func (c *Cluster) Dir() string { return c.dir }

// Client is a clientset with cluster-admin rights.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// RESTConfig is the admin client's configuration (a copy).
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.config) }

// Kubeconfig is the path of the admin kubeconfig (system:masters).
func (c *Cluster) Kubeconfig() string { return filepath.Join(c.dir, "admin.kubeconfig") }

// Server is the API server's URL (https://<node IP>:<port>).
func (c *Cluster) Server() string { return c.config.Host }

// NodeName is the name the node is registered under.
func (c *Cluster) NodeName() string { return c.node }

// NodeIP is the node's address (InternalIP): the host's non-loopback IPv4
// address, where the kubelet and the API server listen, and where a pod
// or the API server reaches a server run by the test (an admission
// webhook: clientConfig.url https://<NodeIP>:<port>/..., or a Service
// without selector whose EndpointSlice points there: the API server routes
// to endpoints).
func (c *Cluster) NodeIP() string { return c.nodeIP }

// Containerd is the node's containerd: StartPlugin starts an NRI plugin
// that sees the kubelet's containers; Crictl inspects them.
func (c *Cluster) Containerd() *e2e.Env { return c.env }

// KubeletRootDir is the kubelet's --root-dir.
func (c *Cluster) KubeletRootDir() string { return filepath.Join(c.dir, "kubelet") }

// PluginRegistryDir is where kubelet plugins (a DRA driver) put their
// registration sockets: the kubelet watches it.
func (c *Cluster) PluginRegistryDir() string {
	return filepath.Join(c.KubeletRootDir(), "plugins_registry")
}

// PluginsDir is the parent of the kubelet plugins' own directories
// (a DRA driver's is PluginsDir()/<driver name>, which the driver
// creates).
func (c *Cluster) PluginsDir() string { return filepath.Join(c.KubeletRootDir(), "plugins") }

// CDIDir is the CDI spec directory containerd reads (its only one): a DRA
// driver writes its specs there.
func (c *Cluster) CDIDir() string { return filepath.Join(c.dir, "cdi") }

// PodSubnet is the CIDR the pods' addresses come from.
func (c *Cluster) PodSubnet() string { return c.subnet }

// Require skips the test when GPUSLICE_SKIP_KUBE=1 or GPUSLICE_SKIP_E2E=1
// and fails it when it is not run as root. Start and Shared call it.
func Require(t testing.TB) {
	t.Helper()
	for _, v := range []string{SkipVar, e2e.SkipVar} {
		if os.Getenv(v) == "1" {
			t.Skip(v + "=1: the tests with a real Kubernetes do not run")
		}
	}
	if os.Geteuid() != 0 {
		t.Fatal("the tests with a real Kubernetes run a kubelet, containerd and runc and need root; " +
			"run go test as root, or set " + SkipVar + "=1 to skip them")
	}
}
