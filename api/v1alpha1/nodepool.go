package v1alpha1

// Facts about node pools that several packages read (the CLI, the
// nodepool, machine and autoscaler controllers).

// NodePoolObjectName returns the object name of the pool named pool in
// cluster: "<cluster>.<pool>". Cluster and pool names are DNS labels, so
// the dot keeps names of different clusters from colliding.
func NodePoolObjectName(cluster, pool string) string { return cluster + "." + pool }

// PoolName returns the pool's name within its cluster: spec.poolName, or
// the object name of a pool made before per-cluster names (see Legacy).
func (np *NodePool) PoolName() string {
	if np.Spec.PoolName != "" {
		return np.Spec.PoolName
	}
	return np.Name
}

// Legacy reports a pool made before per-cluster names: no spec.poolName,
// its object name is its pool name. The nodepool controller renames it to
// NodePoolObjectName and keeps its machines; nothing else acts on it.
func (np *NodePool) Legacy() bool { return np.Spec.PoolName == "" }

// DesiredReplicas is the size the pool is heading to: spec.replicas, or the
// autoscaling minimum when unset.
func (np *NodePool) DesiredReplicas() int {
	if np.Spec.Replicas != nil {
		return int(*np.Spec.Replicas)
	}
	if np.Spec.Autoscaling != nil {
		return int(np.Spec.Autoscaling.MinSize)
	}
	return 0
}

// MachineSelector returns the labels every machine of the pool carries.
func (np *NodePool) MachineSelector() map[string]string {
	return map[string]string{LabelCluster: np.Spec.ClusterName, LabelNodePool: np.PoolName()}
}

// NodePoolKey returns the object name of the pool a machine belongs to.
func (m *Machine) NodePoolKey() string {
	return NodePoolObjectName(m.Spec.ClusterName, m.Spec.NodePoolName)
}

// GPUReplicas is how many times fke's GPU agent advertises each GPU of the
// pool's real nodes as nvidia.com/gpu: the time-slicing replicas when MIG
// is not used, else 1.
func (np *NodePool) GPUReplicas() int64 {
	g := np.Spec.GPU
	if g == nil || g.TimeSlicingReplicas < 2 || (g.MIGStrategy != "" && g.MIGStrategy != "none") {
		return 1
	}
	return int64(g.TimeSlicingReplicas)
}
