package hrw_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/hrw"
)

// Values verified independently of this package's code:
//   - XXH3_64bits("") = 0x2d06800538d394c2 is the reference value of the xxHash spec;
//   - splitmix64.c (Vigna) seeded with 0 outputs 0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4:
//     its next() adds 0x9e3779b97f4a7c15 to the state and applies the finalizer, so
//     Mix(k·0x9e3779b97f4a7c15, 0) must reproduce the k-th output.
func TestIndependentReferenceValues(t *testing.T) {
	assert.Equal(t, uint64(0x2d06800538d394c2), hrw.KeyHash(""), "XXH3_64bits of the empty input")
	assert.Equal(t, uint64(0xe220a8397b1dcdaf), hrw.Mix(0x9e3779b97f4a7c15, 0), "splitmix64 output 1")
	assert.Equal(t, uint64(0x6e789e6aa1b965f4), hrw.Mix(0x3c6ef372fe94f82a, 0), "splitmix64 output 2")
	assert.Equal(t, uint64(0), hrw.Mix(0, 0), "splitmix64 finalizer fixes 0")
}

// Golden vectors: computed once with this implementation and pinned, so that any
// change to the algorithm is caught and other languages have test data.
func TestGoldenVectors(t *testing.T) {
	tests := []struct {
		key, id           string
		keyHash, nodeHash uint64
		mix               uint64
		unit              float64
		score1, score25   float64 // weight 1 and 2.5
	}{
		{"s1", "1b", 0x9a275e3f454930d1, 0x2787100868c6bcc9, 0x8b8b865baeb2f83d, 0.5450977300485639, 1.648016125294231, 4.120040313235577},
		{"s11", "b", 0x51b85b70e1734a7, 0xb910b49a8a575d5d, 0xa1e50844f2289e0f, 0.6324010055851964, 2.182302652029266, 5.455756630073165},
		{"session-42", "vllm-a", 0xa5f911d74983374e, 0xaa010621d9d52956, 0x141448fa1d4dd08d, 0.07843452554998653, 0.39285150560427684, 0.9821287640106922},
		{"conv-000001", "backend-3", 0x14700bec3f535a9f, 0x808cfce490b24bd1, 0xd5042ff1c4559a89, 0.8320951428653046, 5.440445098065566, 13.601112745163915},
		{"", "x", 0x2d06800538d394c2, 0x8739d23cf66e5fe9, 0x7831d2c42d90be3e, 0.4695102433157129, 1.3226373186347937, 3.3065932965869846},
	}
	for _, tt := range tests {
		t.Run(tt.key+"/"+tt.id, func(t *testing.T) {
			assert.Equal(t, tt.keyHash, hrw.KeyHash(tt.key), "KeyHash")
			assert.Equal(t, tt.nodeHash, hrw.NodeHash(tt.id), "NodeHash")
			assert.Equal(t, tt.mix, hrw.Mix(tt.keyHash, tt.nodeHash), "Mix")
			assert.Equal(t, tt.unit, hrw.Unit(tt.mix), "Unit") // exact: m·2^-53
			n1 := mustNode(t, tt.id, 1)
			n25 := mustNode(t, tt.id, 2.5)
			assert.Equal(t, tt.nodeHash, n1.Hash(), "Node.Hash")
			// Scores involve ln; allow for a last-ulp difference of another libm.
			assert.InEpsilon(t, tt.score1, hrw.Score(tt.keyHash, n1), 1e-15, "Score w=1")
			assert.InEpsilon(t, tt.score25, hrw.Score(tt.keyHash, n25), 1e-15, "Score w=2.5")
			assert.InEpsilon(t, -1/math.Log(tt.unit), hrw.Score(tt.keyHash, n1), 1e-15, "Score = -w/ln(u)")
		})
	}
}

func TestGoldenWinners(t *testing.T) {
	uniform := uniformNodes(t, 4)
	weighted := []hrw.Node{
		mustNode(t, "backend-0", 1), mustNode(t, "backend-1", 2),
		mustNode(t, "backend-2", 3), mustNode(t, "backend-3", 4),
	}
	type s = []string
	tests := []struct {
		key                     string
		uniform, weighted       string
		uniformRank, weightRank []string
	}{
		{"s0", "backend-2", "backend-2", s{"backend-2", "backend-0", "backend-3", "backend-1"}, s{"backend-2", "backend-3", "backend-0", "backend-1"}},
		{"s1", "backend-0", "backend-3", s{"backend-0", "backend-3", "backend-2", "backend-1"}, s{"backend-3", "backend-0", "backend-2", "backend-1"}},
		{"session-42", "backend-2", "backend-2", s{"backend-2", "backend-1", "backend-0", "backend-3"}, s{"backend-2", "backend-1", "backend-0", "backend-3"}},
		{"conv-000001", "backend-2", "backend-2", s{"backend-2", "backend-0", "backend-3", "backend-1"}, s{"backend-2", "backend-3", "backend-1", "backend-0"}},
		{"6f1c2a9e-4b7d-4c1a-9e3b-2d5f8a7c6b10", "backend-3", "backend-3", s{"backend-3", "backend-1", "backend-2", "backend-0"}, s{"backend-3", "backend-1", "backend-2", "backend-0"}},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			kh := hrw.KeyHash(tt.key)
			assert.Equal(t, tt.uniform, idOf(uniform, hrw.Pick(kh, uniform)), "uniform winner")
			assert.Equal(t, tt.weighted, idOf(weighted, hrw.Pick(kh, weighted)), "weighted winner")
			assert.Equal(t, tt.uniformRank, idsOf(uniform, hrw.Rank(kh, uniform)), "uniform rank")
			assert.Equal(t, tt.weightRank, idsOf(weighted, hrw.Rank(kh, weighted)), "weighted rank")
			// The naive reference (every score computed, sorted) agrees.
			assert.Equal(t, tt.uniformRank, idsOf(uniform, refRank(kh, uniform, nil)), "reference uniform rank")
			assert.Equal(t, tt.weightRank, idsOf(weighted, refRank(kh, weighted, nil)), "reference weighted rank")
		})
	}
}

// The key and the ID are hashed separately: concatenation-equal pairs differ.
func TestNoConcatenationCollision(t *testing.T) {
	tests := []struct{ k1, id1, k2, id2 string }{
		{"s1", "1b", "s11", "b"},
		{"ab", "c", "a", "bc"},
		{"", "xy", "xy", ""}, // the second ID is invalid; compare the raw mix
	}
	for _, tt := range tests {
		t.Run(tt.k1+"+"+tt.id1, func(t *testing.T) {
			m1 := hrw.Mix(hrw.KeyHash(tt.k1), hrw.NodeHash(tt.id1))
			m2 := hrw.Mix(hrw.KeyHash(tt.k2), hrw.NodeHash(tt.id2))
			assert.NotEqual(t, m1, m2)
		})
	}
	a := mustNode(t, "1b", 1)
	b := mustNode(t, "b", 1)
	assert.NotEqual(t, hrw.Score(hrw.KeyHash("s1"), a), hrw.Score(hrw.KeyHash("s11"), b))
	assert.InEpsilon(t, 1.648016125294231, hrw.Score(hrw.KeyHash("s1"), a), 1e-15)
	assert.InEpsilon(t, 2.182302652029266, hrw.Score(hrw.KeyHash("s11"), b), 1e-15)
}

func TestNewNode(t *testing.T) {
	tests := []struct {
		name    string
		id      string
		w       float64
		wantErr error
	}{
		{"ok", "a", 1, nil},
		{"zero weight", "a", 0, nil},
		{"min weight", "a", hrw.MinWeight, nil},
		{"max weight", "a", hrw.MaxWeight, nil},
		{"fractional", "a", 0.25, nil},
		{"empty id", "", 1, hrw.ErrEmptyID},
		{"negative", "a", -1, hrw.ErrInvalidWeight},
		{"negative zero is zero", "a", math.Copysign(0, -1), nil},
		{"NaN", "a", math.NaN(), hrw.ErrInvalidWeight},
		{"+Inf", "a", math.Inf(1), hrw.ErrInvalidWeight},
		{"-Inf", "a", math.Inf(-1), hrw.ErrInvalidWeight},
		{"too small", "a", 1e-300, hrw.ErrInvalidWeight},
		{"subnormal", "a", 5e-324, hrw.ErrInvalidWeight},
		{"too large", "a", 1e300, hrw.ErrInvalidWeight},
		{"max float", "a", math.MaxFloat64, hrw.ErrInvalidWeight},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := hrw.NewNode(tt.id, tt.w)
			if tt.wantErr != nil {
				require.Error(t, err)
				assert.True(t, errors.Is(err, tt.wantErr), "errors.Is(%v, %v)", err, tt.wantErr)
				assert.Equal(t, hrw.Node{}, n)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.id, n.ID())
			assert.Equal(t, tt.w, n.Weight())
			assert.Equal(t, hrw.NodeHash(tt.id), n.Hash())
		})
	}
}

func TestNodeString(t *testing.T) {
	assert.Equal(t, "a", mustNode(t, "a", 1).String())
	assert.Equal(t, "a(w=2.5)", mustNode(t, "a", 2.5).String())
}

func TestUnit(t *testing.T) {
	tests := []struct {
		mixed uint64
		want  float64
	}{
		{0, 0x1p-54},                      // m == 0 is mapped above 0
		{0x7ff, 0x1p-54},                  // low 11 bits are dropped
		{0x800, 0x1p-53},                  // m == 1
		{1 << 63, 0.5},                    // m == 2^52
		{math.MaxUint64, 1 - 0x1p-53},     // never 1
		{0xfffffffffffff800, 1 - 0x1p-53}, // same m
	}
	for _, tt := range tests {
		got := hrw.Unit(tt.mixed)
		assert.Equal(t, tt.want, got, "Unit(%#x)", tt.mixed)
		assert.True(t, got > 0 && got < 1)
	}
}

// The equal-weight fast path compares m instead of s; that is the same order only if
// the computed -w/ln(u) is non-decreasing in m. Check neighbours on the 2^-53 grid near
// 0, around every power of two down to 2^-20, near 1, and at random.
func TestScoreMonotoneInM(t *testing.T) {
	check := func(m uint64) {
		u0, u1 := hrw.Unit(m<<11), hrw.Unit((m+1)<<11)
		require.LessOrEqual(t, math.Log(u0), math.Log(u1), "ln not monotone at m=%d", m)
		for _, w := range []float64{1, 0.3} {
			require.LessOrEqual(t, -w/math.Log(u0), -w/math.Log(u1), "score not monotone at m=%d w=%g", m, w)
		}
	}
	for m := uint64(0); m < 2048; m++ {
		check(m)
	}
	for e := 33; e <= 53; e++ {
		c := uint64(1) << e
		for m := c - 512; m < c-1 || (e < 53 && m < c+512); m++ {
			check(m)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50000 {
		check(rng.Uint64N(1<<53 - 1))
	}
}

// The bounds used to avoid ln must hold for the computed ln with a wide margin (the code
// widens them by a relative 1e-9): the pruning bound -ln(u) >= 1-u and the two-sided
// bound 2(1-u)/(1+u) <= -ln(u) <= (1-u)/sqrt(u).
func TestPruningBound(t *testing.T) {
	check := func(m uint64) {
		u := hrw.Unit(m << 11)
		l := -math.Log(u)
		require.GreaterOrEqual(t, l*(1+1e-12), 1-u, "m=%d", m)
		require.GreaterOrEqual(t, l*(1+1e-12), 2*(1-u)/(1+u), "m=%d", m)
		require.LessOrEqual(t, l*(1-1e-12), (1-u)/math.Sqrt(u), "m=%d", m)
	}
	for m := uint64(1<<53 - 20000); m < 1<<53; m++ {
		check(m)
	}
	for m := uint64(0); m < 1000; m++ {
		check(m)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 50000 {
		check(rng.Uint64N(1 << 53))
	}
}
