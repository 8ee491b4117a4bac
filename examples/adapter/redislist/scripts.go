package redislist

import "github.com/redis/go-redis/v9"

// bumpLua counts up the attempt field of an element (see encode.go) that
// is handed back to its group; an element without the header is handed
// back as it is.
const bumpLua = `
local function bump(v)
  if string.sub(v, 1, 4) == 'RLQ1' then
    local a = tonumber(string.sub(v, 5, 12), 16)
    if a and a < 4294967295 then
      return 'RLQ1' .. string.format('%08x', a + 1) .. string.sub(v, 13)
    end
  end
  return v
end
`

// publishScript appends the elements ARGV[2..] to the list of every group
// of the topic (the set KEYS[1]; a group's list is ARGV[1]..group) in one
// atomic step, so every group gets the whole batch or none of it. It
// returns the number of groups.
var publishScript = redis.NewScript(`
local groups = redis.call('SMEMBERS', KEYS[1])
for _, g in ipairs(groups) do
  redis.call('RPUSH', ARGV[1] .. g, unpack(ARGV, 2))
end
return #groups
`)

// receiveScript refreshes the consumer's owner key (KEYS[3], TTL ARGV[2]
// ms), registers the consumer ARGV[3] in the group's consumer set
// (KEYS[4]) and moves up to ARGV[1] elements from the head of the group's
// list (KEYS[1]) to the tail of the consumer's processing list (KEYS[2]).
var receiveScript = redis.NewScript(`
redis.call('SET', KEYS[3], '1', 'PX', ARGV[2])
redis.call('SADD', KEYS[4], ARGV[3])
local out = {}
for i = 1, tonumber(ARGV[1]) do
  local v = redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')
  if not v then break end
  out[#out + 1] = v
end
return out
`)

// settleScript applies settlements in order: ARGV holds pairs of an
// operation ('a' ack, 'n' nack) and an element. Both remove the element
// from the processing list (KEYS[1]); a nack pushes it back to the head of
// the group's list (KEYS[2]) with its attempt counted up. An element no
// longer in the processing list (reclaimed meanwhile) is left alone.
var settleScript = redis.NewScript(bumpLua + `
for i = 1, #ARGV, 2 do
  local removed = redis.call('LREM', KEYS[1], -1, ARGV[i + 1])
  if removed == 1 and ARGV[i] == 'n' then
    redis.call('LPUSH', KEYS[2], bump(ARGV[i + 1]))
  end
end
return 0
`)

// reclaimScript hands processing lists back to the group's list (ARGV[2]),
// oldest element first at the head. With ARGV[3] a consumer ID, it does so
// for that consumer (its own Close; its owner key is deleted); with ARGV[3]
// empty, for every consumer of the set KEYS[1] whose owner key
// (ARGV[1]..'owner:'..id) expired: a consumer that died. ARGV[4] '1'
// counts the attempts up. Returns the number of elements moved.
var reclaimScript = redis.NewScript(bumpLua + `
local ids
if ARGV[3] ~= '' then
  ids = {ARGV[3]}
  redis.call('DEL', ARGV[1] .. 'owner:' .. ARGV[3])
else
  ids = redis.call('SMEMBERS', KEYS[1])
end
local moved = 0
for _, id in ipairs(ids) do
  if ARGV[3] ~= '' or redis.call('EXISTS', ARGV[1] .. 'owner:' .. id) == 0 then
    local p = ARGV[1] .. 'processing:' .. id
    while true do
      local v = redis.call('RPOP', p)
      if not v then break end
      if ARGV[4] == '1' then v = bump(v) end
      redis.call('LPUSH', ARGV[2], v)
      moved = moved + 1
    end
    redis.call('SREM', KEYS[1], id)
  end
end
return moved
`)

// lagScript counts the group's list (ARGV[2]) plus the processing lists of
// its consumers (set KEYS[1], lists ARGV[1]..'processing:'..id).
var lagScript = redis.NewScript(`
local n = redis.call('LLEN', ARGV[2])
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  n = n + redis.call('LLEN', ARGV[1] .. 'processing:' .. id)
end
return n
`)
