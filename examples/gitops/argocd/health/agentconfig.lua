-- Argo CD health of an agentworkers.io AgentConfig.
-- Healthy: Ready=True (its latest spec is the active revision).
-- Degraded: Ready=False (the spec, or one of its profiles, was refused: the message says
--   which field; the last good revision stays active).
-- Progressing: no Ready condition yet, or a spec the operator has not seen.
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
  if c.type == "Ready" then
    hs.message = (c.reason or "") .. ": " .. (c.message or "")
    if c.status == "True" then
      hs.status = "Healthy"
    elseif c.status == "False" then
      hs.status = "Degraded"
    end
  end
end
return hs
