// Package numapin carries out the ranker's NUMA decision on the node: every pod on the
// node annotated numa.sextant.io/nodes runs on the CPUs of those NUMA nodes and takes
// memory from them, and no other pod is touched.
//
// The pod's cgroup is narrowed as soon as the kubelet creates it (an inotify watch on
// the kubelet's QoS cgroups), before its sandbox and containers exist: they inherit the
// narrowed set, so no container runs an instruction outside it ("pod-cgroup" pins). A
// pod whose containers started first (the agent was down, or saw the pod late) is
// narrowed at once, children first, and the runtime is told the new set through CRI
// UpdateContainerResources with every other resource as the kubelet set it ("catch-up"
// pins). A pod whose cgroup was widened again by anything, or that a restarted agent
// finds narrowed by someone else to another set, is narrowed to its own ("repair"). The
// cgroups are the ground truth of what is enforced: a restarted agent reads them, writes
// nothing where they already hold the pod's set, and catches up where they do not.
//
// The annotation is the decision: admission keeps it as the ranker wrote it on the
// Binding. Should it change anyway after this process pinned the pod, the change is
// reported (a Warning event, a metric) and not followed. A value the node cannot carry out (NUMA
// node IDs it does not have, a malformed value) is reported the same way and the pod is
// left as the kubelet made it. With the kubelet's static CPU manager or Static memory
// manager, the kubelet owns cpusets and the agent pins nothing. State says which, for
// the node's NodeTopology.
package numapin
