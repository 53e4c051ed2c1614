package nodepods

import corev1 "k8s.io/api/core/v1"

// EventName is the name of the Event the agent records about pod for what suffix says
// (e.g. "numa-pinned"). It is derived from the pod, its UID's first characters (another
// pod of the same name may come) and suffix, so an agent that restarts and records the
// same again finds the Event there (AlreadyExists) instead of adding one.
func EventName(pod *corev1.Pod, suffix string) string {
	uid := string(pod.UID)
	if len(uid) > 8 {
		uid = uid[:8]
	}
	tail := "." + uid + "." + suffix
	name := pod.Name
	if max := 253 - len(tail); len(name) > max {
		name = name[:max]
	}
	return name + tail
}
