-- Argo CD health of an agentworkers.io AgentConfig, from its kstatus conditions.
-- Healthy: Ready=True (its spec and profiles are the active revision).
-- Degraded: Stalled=True (refused: the message names the field; the last good revision
--   stays active), or Ready=False from an operator that writes no Stalled yet.
-- Progressing: no status yet, a spec the operator has not seen, or Reconciling=True (a
--   change waits for the rest of its change set before it is cut into one revision).
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
local stalled, reconciling, ready = by_type["Stalled"], by_type["Reconciling"], by_type["Ready"]
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = says(stalled)
elseif reconciling ~= nil and reconciling.status == "True" then
  hs.message = says(reconciling)
elseif ready ~= nil then
  hs.message = says(ready)
  if ready.status == "True" then
    hs.status = "Healthy"
  elseif ready.status == "False" and stalled == nil then
    hs.status = "Degraded"
  end
end
return hs
