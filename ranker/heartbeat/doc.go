// Package heartbeat gives the ranker's plugins an in-memory, watch-fed view of the
// agents' heartbeat objects (NodeBandwidth, NodeTopology), decoded once into their Go
// types so that Filter and Score never decode or call the API server.
//
// # Poison
//
// Every heartbeat object the API server accepts is taken without error, whatever any
// agent's credentials wrote: one that does not decode or that the ranker cannot use
// (DecodeBandwidth, DecodeTopology) is held as a Rejected, its node counts as having no
// report of that kind, it is logged and counted once per object version
// (sextant_ranker_heartbeat_rejected_total{kind,reason}), and the watches go on: one
// object any agent can write must not keep the store from syncing, nor the ranker from
// starting.
//
// # Arrival
//
// A NodeBandwidth's Received is when it reached the ranker (the informer's event), on
// the ranker's clock: staleness is judged by it, never by the agent's sampleTime. A
// version the store already holds (a relist) keeps its first arrival. What the ranker
// lists when it starts arrived at some unknown time before; for those the API server's
// time of the status write (managed fields) counts, when earlier than the listing, so a
// report a dead agent left behind is not fresh just because the ranker restarted.
//
// A new version delivered late, by the relist after a watch break, is dated as if it
// had come as promptly as the node's previous one: when its delay from status write to
// arrival exceeds the previous version's by more than lateAllowance, Received is its
// write time plus the previous delay. Both delays carry the same offset between the API
// server's and the ranker's clocks, so only the extra delay counts and a skewed clock
// alone never makes a report stale; a node without a previous report (its first, or
// after a deletion) keeps the arrival (see dateReport). Arrived keeps the real first
// arrival beside it, for whoever asks whether a report came in after some moment.
package heartbeat
