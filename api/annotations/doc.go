// Package annotations is the pod-facing contract of sextant: the annotation keys users
// and the ranker write on pods, their parsers and formatters. The agent, the ranker and
// the webhook all parse with this code, so the node enforces exactly what the ranker
// meant and the webhook refuses exactly what the ranker could not read.
//
// Parsers here read input that pod authors control: they are bounded in size and run in
// time linear in their input, and each has a fuzz test.
package annotations
