package hrw

// NodeWithHash builds a Node with a chosen hash, so tests can construct exact ties
// (two IDs with the same hash have the same mixed value for every key). Test-only.
func NodeWithHash(id string, hash uint64, weight float64) Node {
	return Node{id: id, pre: premix(hash), weight: weight}
}
