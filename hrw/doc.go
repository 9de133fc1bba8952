// Package hrw implements weighted rendezvous hashing (highest random weight, HRW): for
// a key (a session ID) every node (an inference backend) gets a pseudo-random score,
// and the node with the highest score wins. Every process that knows the same node set
// computes the same winner, with no coordination, no shared state and no per-process
// seed; removing a node moves only the keys it won (each to its runner-up), and adding
// one moves only the keys the newcomer now wins.
//
// What it is: pure functions over a []Node ([Pick], [PickFunc], [Rank], [TopK],
// [TopKFunc]), a zero-allocation accumulator for nodes embedded in the caller's own
// structs ([Best]), and an immutable, prepared node set ([Ranker]).
//
// What it is not: it keeps no sticky bindings, knows nothing about health, load or
// time, starts no goroutines and holds no locks. The affinity package builds session
// stickiness on top of it.
//
// # Algorithm
//
// The algorithm is specified exactly, so that a gateway in another language can
// reproduce the placements bit for bit. All arithmetic is on unsigned 64-bit integers
// (wrapping) and IEEE-754 binary64.
//
//	XXH3(b)        = XXH3_64bits(b) with seed 0 (the xxHash spec; XXH3("") = 0x2d06800538d394c2)
//	splitmix64(x)  : x ^= x >> 30; x *= 0xbf58476d1ce4e5b9
//	                 x ^= x >> 27; x *= 0x94d049bb133111eb
//	                 x ^= x >> 31; return x
//	KeyHash(key)   = XXH3(key)                      (once per request)
//	NodeHash(id)   = splitmix64(XXH3(id))           (once per node, stored in the Node)
//	Mix(k, n)      = splitmix64(k ^ n)
//	m              = Mix(KeyHash(key), NodeHash(id)) >> 11      (the top 53 bits)
//	u              = m · 2^-53, or 2^-54 if m == 0  (so 0 < u < 1, exactly representable)
//	s              = -w / ln(u)                     (the score; w > 0 is the node's weight)
//
// ln is the natural logarithm of binary64 (Go's math.Log). A weight is 0 (the node never
// wins) or a value in [[MinWeight], [MaxWeight]] = [1e-280, 1e280]; anything else
// (negative, NaN, ±Inf, out of range) is rejected with [ErrInvalidWeight], an empty ID
// with [ErrEmptyID]. Only weight ratios matter.
//
// The key and the ID are hashed separately and combined by a bijective mixer, never
// concatenated: ("s1", "1b") and ("s11", "b") score differently.
//
// Canonical order (best first) of the nodes for one key:
//
//  1. higher s;
//  2. on equal s, higher m;
//  3. on equal m, the lexicographically smaller ID (byte-wise string comparison);
//  4. on equal ID (a duplicate), the earlier position in the input.
//
// Nodes with weight 0 never win and are left out of [Rank] and [TopK]. Duplicate IDs
// collapse to their first occurrence: its weight counts, later copies are ignored even if
// their weight differs. Nothing else about the input order matters.
//
// The score is the logarithmic method for weighted rendezvous hashing: -ln(u) is an
// Exp(1) variate, so 1/s is exponential with rate w and a node wins with probability
// w/Σw. Raising one node's weight only raises its own score, so keys move only to that
// node.
//
// # Fast paths
//
// For a fixed weight s is monotone in m, so two nodes of equal weight are ordered by
// (m, ID) with no logarithm: with all weights equal a selection costs one mix and one
// integer compare per node and looks at IDs only on an exact 53-bit tie. The first step
// of splitmix64, x ^ x>>30, is linear over XOR, so each [Node] stores its hash with that
// step applied and a selection applies it to the key hash once. Its last step,
// z ^ z>>31, leaves the top 31 bits of z alone, so nodes whose z differ there are
// ordered by z: the loops run the two multiply-xorshift steps between (as many
// multiplies as splitmix64 has, one xorshift fewer) and finish the mix only when the
// top 31 bits tie. Up to 64 nodes the loop is branch-free (one compare and three
// conditional moves per node; a tie is detected, not resolved, and sends the call to
// the exact path); above, it is unrolled by four with one well-predicted compare per node.
// [Ranker] keeps the hashes contiguous (structure of arrays) and checks weights and
// duplicates once, at [New]. (This needs
// the computed ln to be non-decreasing on the 2^-53 grid of u, where neighbouring values
// of ln differ by at least an ulp of the result; the tests check it for Go's math.Log
// near the boundaries and on random neighbours.)
//
// With mixed weights over up to 64 nodes, the selections need no ln at all on their usual
// path: from the top 31 bits of the unfinished mix, a branch-free loop computes for every
// node a lower bound of 1/s = -ln(u)/w (first 1-u, then the first four terms of the
// series -ln(1-x) = x + x²/2 + ...), keeps the smallest two and proves the smallest
// one's owner the exact winner with an upper bound of its -ln(u); the proof and its
// rounding margin are in weighted.go. Only when it fails (a near-tie: under 1 % of keys
// at 8 nodes, 0.01 % at 64) does the exact selection below run.
//
// Above 64 nodes, a node needs its ln only when it may beat the current best (or the
// k-th best in [TopK]). Because -ln(u) >= 1-u, a node's score is at most w/(1-u), and
// 1-u = (2^53-m)·2^-53 is exact; a node is skipped when w·(1+1e-9) < s_best·(1-u).
// (The loops use the top 31 bits t of the unfinished mix instead of m, with
// 1-u > (2^31-1-t)·2^-31, one conversion and one product per node; a [Ranker] over more
// than 128 nodes first passes over, with one integer compare each, the nodes that this
// test would skip even with the set's largest weight; [Pick] over more than 128 nodes
// does the same past its first 64 nodes against a cap on the weights, with a second
// compare per node for the weight, and raises the cap when a heavier node comes.)
// A [Ranker] over more than 64 nodes that carry 2 to 8 distinct weights (at least 8
// nodes per weight on average) groups them into weight classes: for a fixed w the score
// is strictly increasing in u, so each class's winner is its equal-weight winner
// (largest m, then smallest ID), found by the equal-weight loop, and only the k class
// winners are compared by score (the two-sided bounds below, ln on near-ties).
// The relative margin 1e-9 is about a million times larger than the rounding error of
// ln, the division and the two products, so a skipped node's computed score is always
// strictly below s_best and the result is identical to computing every score and
// sorting by the canonical order (a property test compares both over thousands of
// random weight sets). When a node does escape, [Pick] first compares two-sided bounds,
// 2(1-u)/(1+u) <= -ln(u) <= (1-u)/sqrt(u), widened by the same margin; only when the
// bounds of the two scores overlap (they are within about (1-u)²/8 of each other) are
// the two logarithms taken. A node escapes the bound with probability about w/(the total
// weight seen so far), so a weighted selection over n nodes in random order takes
// O(log n) logarithms rather than n. The weight bounds [MinWeight] and [MaxWeight] keep
// every score finite and normal, which the argument needs.
//
// The duplicate rule is free with equal weights: a later copy of an ID has the same m
// and ID as its first occurrence and loses on position. With varied weights [Pick]
// checks the nodes before the winner for its ID (one integer compare each) and, only if
// the winner is a later copy, recomputes with duplicates removed.
//
// Placements with equal weights involve integers only and are bit-exact in every
// language. Weighted placements involve one ln per compared node: a libm whose ln
// rounds differently in the last ulp can only change the result when two scores are
// within an ulp or so of each other (a near-tie, of the order of one key in 10^15).
//
// # References
//
//   - D. G. Thaler and C. V. Ravishankar, "A name-based mapping scheme for rendezvous",
//     University of Michigan CSE-TR-316-96, 1996; and "Using name-based mappings to
//     increase hit rates", IEEE/ACM Transactions on Networking 6(1), 1998 (HRW).
//   - C. Schindelhauer and G. Schomaker, "Weighted distributed hash tables", SPAA 2005;
//     J. Resch, "New hashing algorithms for data storage", 2015 (the logarithmic method).
//   - G. L. Steele Jr., D. Lea and C. H. Flood, "Fast splittable pseudorandom number
//     generators", OOPSLA 2014 (SplitMix; the constants are those of S. Vigna's
//     splitmix64.c).
//   - Y. Collet, xxHash, XXH3 64-bit (github.com/Cyan4973/xxHash, doc/xxhash_spec.md);
//     implemented here by github.com/zeebo/xxh3.
//
// # Concurrency
//
// The functions are pure and safe for concurrent use; they do not modify their inputs.
// A [Node] is an immutable value and a [Ranker] is immutable after [New], so both can be
// shared freely (publish a new Ranker, e.g. through an atomic.Pointer, to change the
// set). A [Best] is a small mutable accumulator owned by one goroutine.
//
// # Usage
//
//	a, _ := hrw.NewNode("vllm-a", 1)
//	b, _ := hrw.NewNode("vllm-b", 1)
//	c, _ := hrw.NewNode("vllm-c", 2) // twice the share of a or b
//	nodes := []hrw.Node{a, b, c}
//
//	k := hrw.KeyHash(sessionID)
//	i := hrw.Pick(k, nodes)                // the winner's index, -1 if none
//	top := hrw.TopK(buf[:0], k, nodes, 2) // winner and runner-up, 0 allocs
//	j := hrw.PickFunc(k, nodes, func(i int) bool { return healthy(nodes[i].ID()) })
//
//	r, err := hrw.New(nodes) // or prepare the set once
//	n, ok := r.Pick(k)
package hrw
