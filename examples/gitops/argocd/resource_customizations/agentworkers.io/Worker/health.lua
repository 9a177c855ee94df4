-- Argo CD health of an agentworkers.io Worker (one agent run).
-- Healthy: the run is Running, Idle (waiting for a query) or Done.
-- Degraded: it Failed or was Killed (Ready=False with the reason), or Ready=False
--   while not waiting.
-- Progressing: anything else (no status yet, Pending, a spec the operator has not seen).
local hs = {status = "Progressing", message = "waiting for the operator"}
local status = obj.status
if status == nil then
  return hs
end
local ready = nil
if status.conditions ~= nil then
  for _, c in ipairs(status.conditions) do
    if c.type == "Ready" then
      ready = c
    end
  end
end
local generation = obj.metadata.generation
if generation ~= nil and status.observedGeneration ~= nil and status.observedGeneration < generation then
  hs.message = "the operator has not seen the latest spec yet"
  return hs
end
local phase = status.phase
local function phase_and(detail)
  if detail ~= nil and detail ~= "" then
    return phase .. ": " .. detail
  end
  return phase
end
if phase == "Running" or phase == "Idle" or phase == "Done" then
  hs.status = "Healthy"
  hs.message = phase_and(status.lastEvent)
  return hs
end
if phase == "Failed" or phase == "Killed" then
  hs.status = "Degraded"
  hs.message = phase_and(status.error)
  return hs
end
if ready ~= nil then
  hs.message = (ready.reason or "") .. ": " .. (ready.message or "")
  if ready.status == "True" then
    hs.status = "Healthy"
  elseif ready.status == "False" and phase ~= nil and phase ~= "Pending" then
    hs.status = "Degraded"
  end
end
return hs
