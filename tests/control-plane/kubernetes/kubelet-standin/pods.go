package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// preloadEnv is the variable whose value names the model a container loads.
const preloadEnv = "OPENMED_SERVICE_PRELOAD_MODELS"

// kubelet holds the caches, the queue and what each container did when it started.
type kubelet struct {
	flags            flags
	client           kubernetes.Interface
	pods             corelisters.PodLister
	configMaps       corelisters.ConfigMapLister
	podsSynced       cache.InformerSynced
	configMapsSynced cache.InformerSynced
	queue            workqueue.TypedRateLimitingInterface[string]
	mu               sync.Mutex
	started          map[types.UID]start
}

// start is what a pod's containers met when they started: the model they load, or why they could not be made.
type start struct {
	at          time.Time
	preload     string
	configError string
}

func newKubelet(f flags, client kubernetes.Interface, factory informers.SharedInformerFactory) *kubelet {
	pods := factory.Core().V1().Pods()
	cms := factory.Core().V1().ConfigMaps()
	k := &kubelet{
		flags: f, client: client, pods: pods.Lister(), configMaps: cms.Lister(),
		podsSynced: pods.Informer().HasSynced, configMapsSynced: cms.Informer().HasSynced,
		queue: newQueue(), started: map[types.UID]start{},
	}
	enqueue := func(obj interface{}) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			k.queue.Add(key)
		}
	}
	_, _ = pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj interface{}) { enqueue(obj) },
		DeleteFunc: enqueue,
	})
	// A pod waiting on a ConfigMap key starts when the key appears, as kubelet's next sync finds it.
	onConfigMap := func(obj interface{}) {
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			k.requeueWaiting(cm.Namespace)
		}
	}
	_, _ = cms.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    onConfigMap,
		UpdateFunc: func(_, obj interface{}) { onConfigMap(obj) },
	})
	return k
}

// requeueWaiting queues the pods of ns whose containers could not be made yet.
func (k *kubelet) requeueWaiting(ns string) {
	pods, err := k.pods.Pods(ns).List(labelsEverything())
	if err != nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, p := range pods {
		if s, ok := k.started[p.UID]; !ok || s.configError != "" {
			k.queue.Add(p.Namespace + "/" + p.Name)
		}
	}
}

// sync brings one pod forward: finish it when deleted, bind it when unscheduled, else report its status. It
// returns when to look again (a warm-up ending, the next crash).
func (k *kubelet) sync(ctx context.Context, key string) (time.Duration, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, nil
	}
	pod, err := k.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	switch {
	case pod.DeletionTimestamp != nil:
		return 0, k.finish(ctx, pod)
	case pod.Spec.NodeName == "":
		return 0, k.bind(ctx, pod)
	case pod.Spec.NodeName != k.flags.node:
		return 0, nil
	}
	s := k.startOf(pod)
	status, after := k.status(pod, s, time.Now())
	if equality.Semantic.DeepEqual(status, &pod.Status) {
		return after, nil
	}
	updated := pod.DeepCopy()
	updated.Status = *status
	_, err = k.client.CoreV1().Pods(ns).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	return after, err
}

// finish removes a pod marked for deletion, as kubelet does once its containers stopped.
func (k *kubelet) finish(ctx context.Context, pod *corev1.Pod) error {
	k.mu.Lock()
	delete(k.started, pod.UID)
	k.mu.Unlock()
	zero := int64(0)
	err := k.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &pod.UID},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// bind schedules a pod on this node through pods/binding, as kube-scheduler does.
func (k *kubelet) bind(ctx context.Context, pod *corev1.Pod) error {
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: k.flags.node},
	}
	err := k.client.CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// startOf resolves a pod's environment once its containers can be made (`makeEnvironmentVariables`), and keeps
// it: a container's environment does not follow later edits of its ConfigMap.
func (k *kubelet) startOf(pod *corev1.Pod) start {
	k.mu.Lock()
	defer k.mu.Unlock()
	if s, ok := k.started[pod.UID]; ok && s.configError == "" {
		return s
	}
	s := start{at: time.Now()}
	if old, ok := k.started[pod.UID]; ok {
		s.at = old.at
	}
	for _, c := range pod.Spec.Containers {
		for _, e := range c.Env {
			value, problem := k.resolve(pod.Namespace, e)
			if problem != "" && s.configError == "" {
				s.configError = problem
			}
			if e.Name == preloadEnv {
				s.preload = value
			}
		}
	}
	if s.configError == "" {
		s.at = time.Now()
	}
	k.started[pod.UID] = s
	return s
}

// resolve gives one variable's value, or kubelet's message for a reference that does not resolve.
func (k *kubelet) resolve(ns string, e corev1.EnvVar) (string, string) {
	ref := (*corev1.ConfigMapKeySelector)(nil)
	if e.ValueFrom != nil {
		ref = e.ValueFrom.ConfigMapKeyRef
	}
	if ref == nil {
		return e.Value, ""
	}
	optional := ref.Optional != nil && *ref.Optional
	cm, err := k.configMaps.ConfigMaps(ns).Get(ref.Name)
	if err != nil {
		if optional {
			return "", ""
		}
		return "", fmt.Sprintf("configmap %q not found", ref.Name)
	}
	value, ok := cm.Data[ref.Key]
	if !ok && !optional {
		return "", fmt.Sprintf("couldn't find key %s in ConfigMap %s/%s", ref.Key, ns, ref.Name)
	}
	return value, ""
}
