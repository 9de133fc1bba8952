package affinitytest_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
)

func TestClock(t *testing.T) {
	start := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	c := affinitytest.NewClock(start)
	assert.Equal(t, start, c.Now())
	assert.Equal(t, start.Add(time.Second), c.Advance(time.Second))
	assert.Equal(t, start.Add(time.Second), c.Now())
	c.Set(start)
	assert.Equal(t, start, c.Now())
}

func TestClockConcurrent(t *testing.T) {
	c := affinitytest.NewClock(time.Unix(0, 0))
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				c.Advance(time.Millisecond)
				_ = c.Now()
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, time.Unix(0, 0).Add(800*time.Millisecond), c.Now())
}

func ExampleClock() {
	c := affinitytest.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	c.Advance(30 * time.Minute)
	fmt.Println(c.Now().Format(time.TimeOnly))
	// Output: 00:30:00
}
