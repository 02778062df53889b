// Command kubelet-standin is the node of the suite's real control plane, where no container runtime runs: it
// registers a Node, binds every unscheduled pod to it through pods/binding (in place of kube-scheduler), and
// reports each pod's status as kubelet would for the OpenMed REST image (docs/development.md, "The real control
// plane"). kubesim's pods follow the same rules (tests/kubesim/src/controllers/controller.rs).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// flags are the stand-in's settings; `scripts/control-plane.sh up` passes them.
type flags struct {
	kubeconfig string
	node       string
	unloadable *regexp.Regexp
	warmup     time.Duration
	crashEvery time.Duration
	workers    int
}

func parseFlags() (flags, error) {
	var f flags
	var unloadable string
	flag.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig of an identity that may bind pods and write their status")
	flag.StringVar(&f.node, "node", "standin", "the Node's name")
	flag.StringVar(&unloadable, "unloadable", "unloadable", "preload values whose model never loads (RE2)")
	flag.DurationVar(&f.warmup, "warmup", time.Second, "time from a container's start to Ready")
	flag.DurationVar(&f.crashEvery, "crash-every", 2*time.Second, "time between restarts of a container whose model never loads")
	flag.IntVar(&f.workers, "workers", 4, "pods handled at once")
	flag.Parse()
	re, err := regexp.Compile(unloadable)
	if err != nil {
		return f, fmt.Errorf("--unloadable: %w", err)
	}
	f.unloadable = re
	if f.kubeconfig == "" {
		return f, fmt.Errorf("--kubeconfig is required")
	}
	return f, nil
}

func main() {
	f, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubelet-standin:", err)
		os.Exit(2)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	if err != nil {
		klog.Fatalf("kubeconfig: %v", err)
	}
	// The benchmark starts 1,000 models at once; client-go's default of 5 requests a second would make the node
	// the bound.
	cfg.QPS, cfg.Burst = 500, 1000
	cfg.UserAgent = "kubelet-standin"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		klog.Fatalf("client: %v", err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	if err := registerNode(ctx, client, f.node); err != nil {
		klog.Fatalf("registering Node %s: %v", f.node, err)
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	k := newKubelet(f, client, factory)
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), k.podsSynced, k.configMapsSynced) {
		klog.Fatal("caches did not sync")
	}
	klog.Infof("node %s ready: binding and running pods", f.node)
	k.run(ctx)
}

// registerNode creates the Node, Ready, or marks an existing one Ready (a restart keeps its pods).
func registerNode(ctx context.Context, client kubernetes.Interface, name string) error {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("20000"),
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
	}}}
	created, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return err
	}
	now := metav1.Now()
	created.Status = corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Phase:       corev1.NodeRunning,
		Addresses:   []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "kubelet-standin is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now,
		}},
		NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "standin", OperatingSystem: "linux", Architecture: "amd64"},
	}
	_, err = client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
	return err
}

// run handles queued pods until ctx ends.
func (k *kubelet) run(ctx context.Context) {
	defer k.queue.ShutDown()
	for i := 0; i < k.flags.workers; i++ {
		go func() {
			for k.next(ctx) {
			}
		}()
	}
	<-ctx.Done()
}

func (k *kubelet) next(ctx context.Context) bool {
	key, quit := k.queue.Get()
	if quit {
		return false
	}
	defer k.queue.Done(key)
	after, err := k.sync(ctx, key)
	switch {
	case err != nil:
		klog.V(2).Infof("pod %s: %v (retrying)", key, err)
		k.queue.AddRateLimited(key)
	case after > 0:
		k.queue.Forget(key)
		k.queue.AddAfter(key, after)
	default:
		k.queue.Forget(key)
	}
	return true
}

// newQueue is client-go's rate-limited work queue, as every controller's.
func newQueue() workqueue.TypedRateLimitingInterface[string] {
	return workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
}
