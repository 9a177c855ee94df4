-- Argo CD health of an agentworkers.io VirtualAgentProfile, from its conditions.
-- Healthy: Ready=True (in its agent's active revision, or shadowed by the AgentConfig's own
--   virtualAgents section, which wins the key); or waiting for its AgentConfig
--   (AgentConfigMissing): nothing is wrong with it, so a sync wave that applies profiles
--   before their AgentConfig goes on to the AgentConfig's wave.
-- Degraded: Stalled=True (refused, or left out of the map: the message says why), or
--   Accepted=False for another reason from an operator that writes no Stalled yet.
-- Progressing: no status yet, a spec the operator has not seen, anything else.
local hs = {status = "Progressing", message = "waiting for the operator"}
local status = obj.status
if status == nil or status.conditions == nil then
  return hs
end
local generation = obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.message = "the operator has not seen the latest spec yet"
  return hs
end
local by_type = {}
for _, c in ipairs(status.conditions) do
  by_type[c.type] = c
end
local function says(c)
  return (c.reason or "") .. ": " .. (c.message or "")
end
local stalled, ready, accepted = by_type["Stalled"], by_type["Ready"], by_type["Accepted"]
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = says(stalled)
elseif accepted ~= nil and accepted.reason == "AgentConfigMissing" then
  hs.status = "Healthy"
  hs.message = says(accepted)
elseif ready ~= nil then
  hs.message = says(ready)
  if ready.status == "True" then
    hs.status = "Healthy"
  end
elseif accepted ~= nil then
  hs.message = says(accepted)
  if accepted.status == "True" or accepted.reason == "Overridden" then
    hs.status = "Healthy"
  elseif accepted.status == "False" then
    hs.status = "Degraded"
  end
end
return hs
