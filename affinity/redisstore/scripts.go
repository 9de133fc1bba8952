package redisstore

import (
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/agentserve/sessionaffinity/affinity"
)

// MaxRecordBytes is the longest value a binding's key can hold: the record is the
// backend ID alone, so affinity.MaxBackendIDBytes (4,096 bytes). A key holding a longer
// string, or a value of another type (a hash, a list: WRONGTYPE for GET), holds no
// binding: the scripts treat it as absent and overwrite it by the usual rules, within the
// same atomic call, without reading the value out (see [Store.Repairs]).
const MaxRecordBytes = affinity.MaxBackendIDBytes

// bindingLua is the prelude of every script that reads a binding. binding(k) returns the
// key's value when it holds a binding record (false when absent), and a description of
// what it held instead when it holds none ("" otherwise): the type's name ("hash") for a
// value that is no string, "string of N bytes" for one over MaxRecordBytes. STRLEN is
// O(1) and reads no value, so a 10 MB string costs no transfer and no copy into Lua.
var bindingLua = `
local function binding(k)
  local n = redis.pcall('STRLEN', k)
  if type(n) == 'table' then
    return false, redis.call('TYPE', k)['ok']
  end
  if n > ` + strconv.Itoa(MaxRecordBytes) + ` then
    return false, 'string of ' .. n .. ' bytes'
  end
  return redis.call('GET', k), ''
end
`

// Lua scripts: each one is atomic on the server and costs one round trip (EVALSHA). The
// last element of each reply is binding's description of a key that held no binding
// record and was repaired ("" when the key was sound).
var (
	// claim: adopt and extend an existing binding, or create it (SET PX).
	claimScript = redis.NewScript(bindingLua + `
local v, bad = binding(KEYS[1])
if v then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {0, v, ''}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, ARGV[1], bad}`)
	// rebind: compare-and-set old -> new (also when absent), then publish the change.
	rebindScript = redis.NewScript(bindingLua + `
local v, bad = binding(KEYS[1])
if v and v ~= ARGV[1] then
  return {0, v, ''}
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('PUBLISH', ARGV[4], ARGV[5])
return {1, ARGV[2], bad}`)
	// forget: delete and publish (DEL takes a key of any type).
	forgetScript = redis.NewScript(`
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[1], ARGV[2])
return 1`)
	// forgetIf: compare-and-delete (absent or another backend: nothing), then publish. A
	// key holding no binding is deleted without a message: no replica stores it.
	forgetIfScript = redis.NewScript(bindingLua + `
local v, bad = binding(KEYS[1])
if bad ~= '' then
  redis.call('DEL', KEYS[1])
  return {0, bad}
end
if v ~= ARGV[1] then
  return {0, ''}
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return {1, ''}`)
	// refresh: extend the binding if it is ours and re-create it if lost (or if the key
	// holds no binding); return the value found (ours when re-created).
	refreshScript = redis.NewScript(bindingLua + `
local v, bad = binding(KEYS[1])
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {ARGV[1], bad}
end
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return {v, ''}`)
)

var errUnexpectedReply = errors.New("redisstore: unexpected script reply")

// setReply parses the reply {flag, backend, repaired} of the claim and rebind scripts
// (after err, the call's error) and reports a repaired key.
func (s *Store) setReply(op string, key affinity.StoreKey, v any, err error) (string, bool, error) {
	if err != nil {
		return "", false, err
	}
	a, ok := v.([]any)
	if !ok || len(a) != 3 {
		return "", false, errUnexpectedReply
	}
	flag, _ := a[0].(int64)
	val, _ := a[1].(string)
	s.checkRepair(op, key, a[2])
	return val, flag == 1, nil
}

// checkRepair reports a key a script repaired (found: binding's description, "" or nil
// when the key was sound): counted in [Store.Repairs] and, with [WithRecorder], as a
// store error of op; logged at WARN with [WithLogger], one line per repaired key.
func (s *Store) checkRepair(op string, key affinity.StoreKey, found any) {
	what, _ := found.(string)
	if what == "" {
		return
	}
	s.repairs.Add(1)
	if s.rec != nil {
		s.rec.StoreError(op)
	}
	if s.log != nil {
		s.log.Warn("redisstore: key repaired: it held no binding record (wrong type or over-long value) and was overwritten by this call's rules; Redis stays in use",
			"address", s.cfg.Address, "op", op, "key", s.Key(key), "found", what)
	}
}

// Repairs returns how many keys the Store's calls found holding no binding record and
// repaired: a value of another type than string (a hash, a list: written by another
// program under the prefix) or a string over [MaxRecordBytes]. Such a key is a problem
// of that key alone, not of Redis: the call that finds it treats it as absent (claim,
// rebind and refresh overwrite it with their binding, forgetIf deletes it), within its
// one atomic script, and succeeds, so the Scheduler keeps using Redis. Each repair is
// also counted as a store error of the op that made it (agentserve_affinity_store_errors_total{op})
// with [WithRecorder] and logged once at WARN with [WithLogger] ("redisstore: key
// repaired: ...", with the op, the Redis key, which holds hashes only, and what it held).
// Safe for concurrent use; one atomic load.
func (s *Store) Repairs() uint64 { return s.repairs.Load() }
