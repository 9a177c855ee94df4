-- Argo CD health of an agentworkers.io VirtualAgentProfile.
-- Healthy: Accepted=True (in its agent's active revision), or Accepted=False because the
--   AgentConfig's own virtualAgents section declares the same key and wins (Overridden).
-- Degraded: Accepted=False for any other reason (the message names the field).
-- Progressing: no Accepted condition yet, or a spec the operator has not seen.
local hs = {status = "Progressing", message = "waiting for the operator"}
local status = obj.status
if status == nil or status.conditions == nil then
  return hs
end
local generation = obj.metadata.generation
if generation ~= nil and status.observedGeneration ~= nil and status.observedGeneration < generation then
  hs.message = "the operator has not seen the latest spec yet"
  return hs
end
for _, c in ipairs(status.conditions) do
  if c.type == "Accepted" then
    hs.message = (c.reason or "") .. ": " .. (c.message or "")
    if c.status == "True" or c.reason == "Overridden" then
      hs.status = "Healthy"
    elseif c.status == "False" then
      hs.status = "Degraded"
    end
  end
end
return hs
