package main

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func labelsEverything() labels.Selector { return labels.Everything() }

// status is the pod's status as kubelet's `generateAPIPodStatus` would report it for how its containers
// started, and when to look again. Containers whose environment did not resolve wait with
// CreateContainerConfigError and the pod stays Pending; a model that never loads crashes and restarts with a
// rising restartCount (CrashLoopBackOff), never Ready; any other turns Ready after the warm-up.
func (k *kubelet) status(pod *corev1.Pod, s start, now time.Time) (*corev1.PodStatus, time.Duration) {
	st := pod.Status.DeepCopy()
	at := metav1.NewTime(s.at).Rfc3339Copy()
	if st.StartTime == nil {
		st.StartTime = &at
	}
	st.HostIP = "127.0.0.1"
	st.HostIPs = []corev1.HostIP{{IP: "127.0.0.1"}}
	var after time.Duration
	ready := false
	var restarts int32
	crashing := s.configError == "" && k.flags.unloadable.MatchString(s.preload)
	switch {
	case s.configError != "":
		st.Phase = corev1.PodPending
	case crashing:
		st.Phase = corev1.PodRunning
		since := now.Sub(s.at)
		restarts = int32(since / k.flags.crashEvery)
		after = k.flags.crashEvery - since%k.flags.crashEvery
	default:
		st.Phase = corev1.PodRunning
		ready = !now.Before(s.at.Add(k.flags.warmup))
		if !ready {
			after = s.at.Add(k.flags.warmup).Sub(now)
		}
	}
	names := make([]string, 0, len(pod.Spec.Containers))
	statuses := make([]corev1.ContainerStatus, 0, len(pod.Spec.Containers))
	for _, c := range pod.Spec.Containers {
		names = append(names, c.Name)
		statuses = append(statuses, containerStatus(pod, c, s, at, ready, restarts, crashing))
	}
	st.ContainerStatuses = statuses
	nowT := metav1.NewTime(now).Rfc3339Copy()
	notReady := fmt.Sprintf("containers with unready status: [%s]", strings.Join(names, " "))
	st.Conditions = setCondition(st.Conditions, corev1.PodReadyToStartContainers, true, "", "", nowT)
	st.Conditions = setCondition(st.Conditions, corev1.PodInitialized, true, "", "", nowT)
	st.Conditions = setCondition(st.Conditions, corev1.ContainersReady, ready, "ContainersNotReady", notReady, nowT)
	st.Conditions = setCondition(st.Conditions, corev1.PodReady, ready, "ContainersNotReady", notReady, nowT)
	st.Conditions = setCondition(st.Conditions, corev1.PodScheduled, true, "", "", nowT)
	return st, after
}

// containerStatus is one container's state, as kubelet's `convertToAPIContainerStatuses` gives it.
func containerStatus(pod *corev1.Pod, c corev1.Container, s start, at metav1.Time, ready bool, restarts int32,
	crashing bool) corev1.ContainerStatus {
	cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: ready, RestartCount: restarts}
	started := s.configError == ""
	cs.Started = &started
	switch {
	case s.configError != "":
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: s.configError}
	case crashing && restarts > 0:
		started = false
		cs.State.Waiting = &corev1.ContainerStateWaiting{
			Reason:  "CrashLoopBackOff",
			Message: fmt.Sprintf("back-off restarting failed container %s in pod %s_%s(%s)", c.Name, pod.Name, pod.Namespace, pod.UID),
		}
		cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{
			ExitCode: 1, Reason: "Error", Message: "model could not be loaded", StartedAt: at, FinishedAt: at,
		}
		cs.ContainerID = "standin://" + string(pod.UID) + "/" + c.Name
		cs.ImageID = c.Image
	default:
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: at}
		cs.ContainerID = "standin://" + string(pod.UID) + "/" + c.Name
		cs.ImageID = c.Image
	}
	return cs
}

// setCondition sets one condition, keeping its transition time while its status stands, as kubelet does.
func setCondition(conds []corev1.PodCondition, t corev1.PodConditionType, ok bool, reason, message string,
	now metav1.Time) []corev1.PodCondition {
	status := corev1.ConditionFalse
	if ok {
		status = corev1.ConditionTrue
		reason, message = "", ""
	}
	for i := range conds {
		if conds[i].Type != t {
			continue
		}
		if conds[i].Status != status {
			conds[i].LastTransitionTime = now
		}
		conds[i].Status, conds[i].Reason, conds[i].Message = status, reason, message
		return conds
	}
	return append(conds, corev1.PodCondition{
		Type: t, Status: status, Reason: reason, Message: message, LastTransitionTime: now,
	})
}
