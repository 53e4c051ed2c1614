// Command exit0 exits 0 at once. It is the whole of the sextant.local/exit0 image, to
// which the virtual-node controller swaps a finished sidecar: the node restarts the
// container with it, and the container ends successfully.
package main

func main() {}
