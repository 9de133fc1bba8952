package redisstore_test

import (
	"fmt"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/redisstore"
	"github.com/agentserve/sessionaffinity/hrw"
)

// What a binding looks like in Redis: the key carries hashes only (the session's in a
// Cluster hash tag), the value is the backend ID. redis-cli GET on this key prints the
// session's backend.
func ExampleStore_Key() {
	st, err := redisstore.New(redisstore.Config{Address: "127.0.0.1:6379", Prefix: "gw:"})
	if err != nil {
		panic(err)
	}
	defer st.Close()
	fmt.Println(st.Key(affinity.StoreKey{Session: hrw.KeyHash("sess-1"), Tier: hrw.KeyHash("")}))
	// Output: gw:{a171103fd7ab6328}:2d06800538d394c2
}
