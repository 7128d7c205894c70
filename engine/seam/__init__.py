"""The typed seam between Python and the Lua scripts of engine/lua: loading, calls, rows."""
