-- Drives compactd with Neovim's built-in LSP client (vim.lsp.start_client, Neovim 0.7+), headless.
-- test_neovim.py runs it as `nvim --headless --clean -u NONE -c "luafile nvim_client.lua"` with:
--   COMPACTD_CMD      the daemon's argv as a JSON array
--   COMPACTD_CWD      the folder the daemon runs in (also the session's cwd)
--   COMPACTD_FIXTURE  a Claude Code transcript to open with session/open
--   COMPACTD_RESULT   where to write what happened, as JSON, for the test to check
-- Every step's request and answer is recorded; a step that fails stops the script, and the
-- record says which step it was.

local cmd = vim.json.decode(os.getenv("COMPACTD_CMD"))
local cwd = os.getenv("COMPACTD_CWD")
local fixture = os.getenv("COMPACTD_FIXTURE")
local result_file = os.getenv("COMPACTD_RESULT")

local record = {
  steps = {},
  status_notes = {},
  progress = {},
  progress_creates = 0,
  exit = vim.NIL,
}

local function save()
  local fh = assert(io.open(result_file, "w"))
  fh:write(vim.json.encode(record))
  fh:close()
end

local function finish(code)
  save()
  vim.cmd(code == 0 and "qall!" or "cquit! " .. code)
end

local handlers = {
  ["compact/status"] = function(_, params)
    table.insert(record.status_notes, params)
  end,
  ["window/workDoneProgress/create"] = function()
    record.progress_creates = record.progress_creates + 1
    return vim.NIL
  end,
  ["$/progress"] = function(_, params)
    table.insert(record.progress, params)
  end,
}

local exited = false
local client_id = vim.lsp.start_client({
  name = "compactd",
  cmd = cmd,
  cmd_cwd = cwd,
  root_dir = cwd,
  init_options = { summarizer = { offline = true } },
  handlers = handlers,
  on_init = function(_, initialize_result)
    record.initialize = initialize_result
  end,
  on_exit = function(code, signal)
    record.exit = { code = code, signal = signal }
    exited = true
  end,
})

local function step(name, ok, detail)
  table.insert(record.steps, { name = name, ok = ok, detail = detail })
  if not ok then
    finish(1)
    error("step failed: " .. name)
  end
end

step("start_client", client_id ~= nil, "vim.lsp.start_client returned nil")
step("initialize", vim.wait(30000, function() return record.initialize ~= nil end, 20), "no initialize result")
local client = vim.lsp.get_client_by_id(client_id)

local function request(name, method, params, timeout)
  local answer, reason = client.request_sync(method, params, timeout or 60000)
  local ok = answer ~= nil and answer.err == nil
  local detail = answer and (answer.err or answer.result) or reason
  step(name, ok, detail)
  record[name] = answer.result
  return answer.result
end

request("open", "session/open", {
  sessionId = "nvim-fixture",
  cwd = cwd,
  model = "claude-sonnet-4-5",
  transcriptPath = fixture,
})
request("status_before", "tokens/status", { sessionId = "nvim-fixture" })
request("compact", "compact/full", { sessionId = "nvim-fixture" }, 120000)
request("status_after", "tokens/status", { sessionId = "nvim-fixture" })

-- compact/status and $/progress may trail the answer by a moment.
vim.wait(5000, function()
  local last = record.status_notes[#record.status_notes]
  return last ~= nil and last.phase == "completed" and #record.progress > 0
    and record.progress[#record.progress].value.kind == "end"
end, 20)

client.stop() -- shutdown, then exit
step("exit", vim.wait(15000, function() return exited end, 20), "the daemon did not exit after shutdown/exit")
finish(0)
