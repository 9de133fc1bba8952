package affinity

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// pickEqual must decline (ok=false: hrw.Pick then decides by ID) when the two best
// candidates have equal m, the top 53 bits of the finished mix, and otherwise return the
// one with the larger m, also when their top 31 bits tie. No search over IDs reaches an
// equal m, so this sets the candidates' premixed hashes directly (mid inverted), the only
// value the loops read besides the weight. White-box for that reason.
func TestPickEqualTopTies(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 9))
	for range 100 {
		z := rng.Uint64()
		require.Equal(t, z, newMixer().mid(unmid(z)))
	}
	for _, n := range []int{2, 3, 8, 64, 65, 66, 100, 512} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			for range 200 {
				kp := premix(rng.Uint64())
				cands := make([]Backend, n)
				for i := range cands {
					cands[i] = MustBackend(fmt.Sprintf("b%d", i), "", 1)
					cands[i].pre = kp ^ unmid(rng.Uint64()>>1) // below the top pair
				}
				top := uint64(1<<31-1)<<33 | rng.Uint64()&low33
				a, b := rng.IntN(n), rng.IntN(n-1)
				if b >= a {
					b++
				}
				cands[a].pre = kp ^ unmid(top)
				// Equal m: the mixes differ below bit 11 only (last keeps that).
				cands[b].pre = kp ^ unmid(top^(1+rng.Uint64()%2047))
				_, ok := pickEqual(unpremix(kp), cands)
				require.False(t, ok, "equal m at %d and %d", a, b)
				// Same top 31 bits, different m: the larger m wins.
				zb := top ^ 1<<(11+rng.IntN(22))
				cands[b].pre = kp ^ unmid(zb)
				want := a
				if last(zb)>>11 > last(top)>>11 {
					want = b
				}
				w, ok := pickEqual(unpremix(kp), cands)
				if n <= pickSmall { // the branch-free loop declines any tie of the top bits
					require.False(t, ok)
					continue
				}
				require.True(t, ok)
				require.Equal(t, want, w)
			}
		})
	}
}

// unmid inverts mixer.mid: the multipliers are odd (invertible mod 2^64) and x ^ x>>27
// is undone by x ^ x>>27 ^ x>>54.
func unmid(z uint64) uint64 {
	c := newMixer()
	y := z * inverse(c.k2)
	y ^= y>>27 ^ y>>54
	return y * inverse(c.k1)
}

// inverse returns the inverse of odd k mod 2^64 (Newton's iteration doubles the correct
// low bits each step).
func inverse(k uint64) uint64 {
	x := k
	for range 6 {
		x *= 2 - k*x
	}
	return x
}

func last(z uint64) uint64 { return z ^ z>>31 }
