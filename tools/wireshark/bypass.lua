-- Wireshark / tshark dissector for the bypass RDM wire protocol, version 7
-- (fabric/rdm/PROTOCOL.md; fabric/rdm/wire.h is the implementation), and for
-- the fi provider's connection-manager messages (fabric/fi/cm.h) that ride
-- inside DATA packets.
--
-- Load:   tshark -X lua_script:tools/wireshark/bypass.lua -r capture.pcap
--         wireshark -X lua_script:tools/wireshark/bypass.lua capture.pcap
-- or copy this file into ~/.local/lib/wireshark/plugins/ (Wireshark 4.x).
--
-- Registered as a heuristic dissector on UDP (a UDP payload whose first two
-- bytes are the magic 0x4259 "BY" and whose length field agrees with the
-- datagram), and under "Decode As" for UDP ports. If another dissector owns
-- the ports first, add `-o udp.try_heuristic_first:TRUE` or use Decode As.
--
-- Field names are bypass.* (filter with `bypass.type == 5`, `bypass.flags.retransmit`,
-- `bypass.msg.tag == 0x...`, `bypass.rma.key`, `bypass.hello.nonce`, ...);
-- `tshark -G fields | grep bypass` lists them.
--
-- A new bit of a flags field or of the HELLO capabilities is one line in the
-- tables below (header_flags, msg_flags, rma_flags, hello_capabilities); a
-- flag meaning "no CRC" also says `no_crc = true` there.

local bypass = Proto("bypass", "bypass RDM protocol")
local cm = Proto("bypass_cm", "bypass fi connection manager")

local MAGIC = 0x4259
local VERSION = 7
local COMMON_LEN = 36
local CM_MAGIC_LE = 0x4d435942 -- "BYCM", little-endian
local CM_TAG_BIT_HI = 0x80000000 -- bit 63 of a tag, in its high 32 bits

local packet_types = {
  [1] = "HELLO", [2] = "HELLO_ACK", [3] = "RESET", [4] = "ACK", [5] = "DATA", [6] = "RMA",
  [7] = "COOKIE",
}
-- Extension header size per type.
local ext_len = { [1] = 56, [2] = 56, [3] = 24, [4] = 40, [5] = 40, [6] = 48, [7] = 56 }

-- { bit mask, abbreviation suffix, label }: one line per flag. A header
-- flag that says the packet carries no CRC-32C adds `no_crc = true`, e.g.
--   { 0x0010, "no_crc", "NO_CRC: not checksummed", no_crc = true },
-- and the CRC status of such packets is Unverified instead of Bad.
local header_flags = {
  { 0x0001, "ack_valid", "ACK_VALID: ack_psn and credit are meaningful" },
  { 0x0002, "ack_req", "ACK_REQ: acknowledge at once (on an ACK: a probe)" },
  { 0x0004, "rnr", "RNR: ack_psn refused, receiver not ready" },
  { 0x0008, "retransmit", "RETRANSMIT: this PSN was sent before" },
  { 0x0010, "unchecked", "UNCHECKED: no CRC-32C (crc 0), to a receiver whose frames come through memory", no_crc = true },
}
local msg_flags = {
  { 0x0001, "tagged", "TAGGED" },
  { 0x0002, "remote_data", "REMOTE_DATA" },
  { 0x0004, "abandoned", "ABANDONED: the sender gave the message up" },
  { 0x0008, "bundle", "BUNDLE: another whole message follows this one's bytes" },
}
local rma_flags = {
  { 0x01, "remote_data", "REMOTE_DATA" },
  { 0x02, "message", "MESSAGE: a rendezvous pull" },
  { 0x04, "copied", "COPIED: the receiver read the message in place" },
  { 0x08, "fetch", "FETCH: the initiator wants the old values" },
  { 0x10, "vouched", "VOUCHED: the sender's guard word vouched for the bytes read in place" },
}
-- HelloHeader::capabilities (HELLO and HELLO_ACK; 0 in a COOKIE).
local hello_capabilities = {
  { 0x00000001, "unchecked_ok", "UNCHECKED_OK: send me DATA, RMA and ACK without a CRC" },
  { 0x00000002, "bundle", "BUNDLE: send me several whole messages in one DATA packet" },
}

local msg_protocols = { [0] = "EAGER", [1] = "RENDEZVOUS" }
local rma_ops = {
  [1] = "WRITE", [2] = "READ_REQ", [3] = "READ_DATA", [4] = "RESPONSE", [5] = "ATOMIC",
  [6] = "ATOMIC_RESP",
}
local rma_status = {
  [0] = "OK", [1] = "BAD_KEY", [2] = "NO_ACCESS", [3] = "OUT_OF_RANGE", [4] = "NO_MESSAGE",
  [5] = "NO_ATOMIC",
}
local reset_reasons = { [1] = "UNKNOWN_INCARNATION", [2] = "NO_SESSION" }
-- libfabric's enum fi_op and enum fi_datatype (fabric/rdm/types.h).
local atomic_ops = {
  [0] = "MIN", [1] = "MAX", [2] = "SUM", [3] = "PROD", [4] = "LOR", [5] = "LAND", [6] = "BOR",
  [7] = "BAND", [8] = "LXOR", [9] = "BXOR", [10] = "ATOMIC_READ", [11] = "ATOMIC_WRITE",
  [12] = "CSWAP", [13] = "CSWAP_NE", [14] = "CSWAP_LE", [15] = "CSWAP_LT", [16] = "CSWAP_GE",
  [17] = "CSWAP_GT", [18] = "MSWAP",
}
local atomic_types = {
  [0] = "INT8", [1] = "UINT8", [2] = "INT16", [3] = "UINT16", [4] = "INT32", [5] = "UINT32",
  [6] = "INT64", [7] = "UINT64", [8] = "FLOAT", [9] = "DOUBLE", [10] = "FLOAT_COMPLEX",
  [11] = "DOUBLE_COMPLEX", [12] = "LONG_DOUBLE", [13] = "LONG_DOUBLE_COMPLEX", [14] = "INT128",
  [15] = "UINT128",
}
local crc_status = { [0] = "Bad", [1] = "Good", [2] = "Unverified" }
local cm_types = { [1] = "CONNREQ", [2] = "ACCEPT", [3] = "REJECT", [4] = "ACK", [5] = "SHUTDOWN" }

local F = ProtoField
local f = {
  magic = F.uint16("bypass.magic", "Magic", base.HEX),
  version = F.uint8("bypass.version", "Version", base.DEC),
  type = F.uint8("bypass.type", "Type", base.DEC, packet_types),
  flags = F.uint16("bypass.flags", "Flags", base.HEX),
  credit = F.uint16("bypass.credit", "Credit", base.DEC),
  src_incarnation = F.uint32("bypass.src_incarnation", "Source incarnation", base.HEX),
  dst_incarnation = F.uint32("bypass.dst_incarnation", "Destination incarnation", base.HEX),
  auth_key = F.uint32("bypass.auth_key", "Auth key", base.HEX),
  psn = F.uint32("bypass.psn", "PSN", base.DEC),
  ack_psn = F.uint32("bypass.ack_psn", "ACK PSN", base.DEC),
  length = F.uint16("bypass.length", "Length", base.DEC),
  reserved = F.uint16("bypass.reserved", "Reserved", base.HEX),
  crc = F.uint32("bypass.crc", "CRC-32C", base.HEX),
  crc_status = F.uint8("bypass.crc.status", "CRC-32C status", base.DEC, crc_status),

  hello_max_datagram = F.uint16("bypass.hello.max_datagram", "Max datagram", base.DEC),
  hello_reserved = F.uint16("bypass.hello.reserved", "Reserved", base.HEX),
  hello_capabilities = F.uint32("bypass.hello.capabilities", "Capabilities", base.HEX),
  hello_nonce = F.uint64("bypass.hello.nonce", "Nonce", base.HEX),
  hello_echo = F.uint64("bypass.hello.echo", "Echo", base.HEX),
  hello_cookie = F.bytes("bypass.hello.cookie", "Cookie"),
  hello_mac = F.bytes("bypass.hello.mac", "MAC (HMAC-SHA-256, truncated)"),

  reset_reason = F.uint8("bypass.reset.reason", "Reason", base.DEC, reset_reasons),
  reset_reserved = F.bytes("bypass.reset.reserved", "Reserved"),
  reset_incarnation = F.uint32("bypass.reset.incarnation", "Incarnation", base.HEX),
  reset_mac = F.bytes("bypass.reset.mac", "MAC (HMAC-SHA-256, truncated)"),

  ack_sack = F.uint64("bypass.ack.sack", "SACK word", base.HEX),
  ack_sacked = F.uint32("bypass.ack.sacked_psn", "Held PSN", base.DEC),
  ack_next_msg_id = F.uint32("bypass.ack.next_msg_id", "Next message id taken (RNR)", base.DEC),
  ack_reserved = F.uint32("bypass.ack.reserved", "Reserved", base.HEX),

  msg_id = F.uint32("bypass.msg.id", "Message id", base.DEC),
  msg_flags = F.uint16("bypass.msg.flags", "Message flags", base.HEX),
  msg_protocol = F.uint8("bypass.msg.protocol", "Protocol", base.DEC, msg_protocols),
  msg_reserved = F.uint8("bypass.msg.reserved", "Reserved", base.HEX),
  msg_total_length = F.uint64("bypass.msg.total_length", "Total length", base.DEC),
  msg_offset = F.uint64("bypass.msg.offset", "Offset", base.DEC),
  msg_tag = F.uint64("bypass.msg.tag", "Tag", base.HEX),
  msg_data = F.uint64("bypass.msg.data", "Remote CQ data", base.HEX),

  offer_pid = F.uint32("bypass.offer.pid", "In-place offer pid", base.DEC),
  offer_reserved = F.uint32("bypass.offer.reserved", "Reserved", base.HEX),
  offer_addr = F.uint64("bypass.offer.addr", "In-place offer address", base.HEX),
  offer_length = F.uint64("bypass.offer.length", "In-place offer length", base.DEC),
  offer_guard_addr = F.uint64("bypass.offer.guard_addr", "Guard word address", base.HEX),
  offer_guard = F.uint64("bypass.offer.guard", "Guard value", base.HEX),

  rma_op = F.uint8("bypass.rma.op", "RMA op", base.DEC, rma_ops),
  rma_flags = F.uint8("bypass.rma.flags", "RMA flags", base.HEX),
  rma_status = F.uint8("bypass.rma.status", "Status", base.DEC, rma_status),
  rma_reserved = F.uint8("bypass.rma.reserved", "Reserved", base.HEX),
  rma_id = F.uint32("bypass.rma.id", "RMA id", base.HEX),
  rma_id_slot = F.uint32("bypass.rma.id.slot", "Op slot", base.DEC, nil, 0x001fffff),
  rma_id_generation = F.uint32("bypass.rma.id.generation", "Slot generation", base.DEC, nil,
                               0xffe00000),
  rma_key = F.uint64("bypass.rma.key", "Key (or pulled msg_id)", base.HEX),
  rma_addr = F.uint64("bypass.rma.addr", "Address", base.HEX),
  rma_total_length = F.uint64("bypass.rma.total_length", "Total length", base.DEC),
  rma_offset = F.uint64("bypass.rma.offset", "Offset", base.DEC),
  rma_data = F.uint64("bypass.rma.data", "Data", base.HEX),
  atomic_op = F.uint8("bypass.rma.atomic.op", "Atomic op", base.DEC, atomic_ops),
  atomic_datatype = F.uint8("bypass.rma.atomic.datatype", "Atomic datatype", base.DEC,
                            atomic_types),
  atomic_count = F.uint16("bypass.rma.atomic.count", "Atomic count", base.DEC),

  payload_length = F.uint32("bypass.payload_length", "Payload length", base.DEC),
  payload = F.bytes("bypass.payload", "Payload"),
}
-- One boolean field per flag of each table.
local function add_flag_fields(prefix, bits, table_)
  for _, fl in ipairs(table_) do
    local fld = F.bool(prefix .. "." .. fl[2], fl[3], bits, nil, fl[1])
    fl.field = fld
    f[prefix .. "." .. fl[2]] = fld
  end
end
add_flag_fields("bypass.flags", 16, header_flags)
add_flag_fields("bypass.msg.flags", 16, msg_flags)
add_flag_fields("bypass.rma.flags", 8, rma_flags)
add_flag_fields("bypass.hello.capabilities", 32, hello_capabilities)
local proto_fields = {}
for _, v in pairs(f) do proto_fields[#proto_fields + 1] = v end
bypass.fields = proto_fields

local cf = {
  magic = F.uint32("bypass.cm.magic", "Magic", base.HEX),
  version = F.uint8("bypass.cm.version", "Version", base.DEC),
  type = F.uint8("bypass.cm.type", "Type", base.DEC, cm_types),
  data_len = F.uint16("bypass.cm.data_len", "Data length", base.DEC),
  conn_id = F.uint64("bypass.cm.conn_id", "Connection id", base.HEX),
  ip = F.ipv4("bypass.cm.ip", "Address IPv4"),
  port = F.uint16("bypass.cm.port", "Address UDP port", base.DEC),
  mac = F.ether("bypass.cm.mac", "Address MAC"),
  incarnation = F.uint32("bypass.cm.incarnation", "Address incarnation", base.HEX),
  data = F.bytes("bypass.cm.data", "Connection data"),
}
cm.fields = { cf.magic, cf.version, cf.type, cf.data_len, cf.conn_id, cf.ip, cf.port, cf.mac,
              cf.incarnation, cf.data }

local e_crc = ProtoExpert.new("bypass.crc.bad", "CRC-32C mismatch", expert.group.CHECKSUM,
                              expert.severity.ERROR)
local e_malformed = ProtoExpert.new("bypass.malformed", "Malformed bypass packet",
                                    expert.group.MALFORMED, expert.severity.ERROR)
local e_version = ProtoExpert.new("bypass.version.unknown", "Unknown protocol version",
                                  expert.group.PROTOCOL, expert.severity.WARN)
local e_retransmit = ProtoExpert.new("bypass.retransmit", "Retransmitted PSN",
                                     expert.group.SEQUENCE, expert.severity.NOTE)
local e_rnr = ProtoExpert.new("bypass.rnr", "Receiver not ready", expert.group.SEQUENCE,
                              expert.severity.NOTE)
bypass.experts = { e_crc, e_malformed, e_version, e_retransmit, e_rnr }

bypass.prefs.verify_crc = Pref.bool("Verify CRC-32C", true,
                                    "Recompute each packet's CRC-32C (PROTOCOL.md, CRC-32C)")

-- CRC-32C (Castagnoli, reflected, init and final XOR 0xffffffff).
local crc_table = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do
    if bit32.band(c, 1) ~= 0 then
      c = bit32.bxor(bit32.rshift(c, 1), 0x82f63b78)
    else
      c = bit32.rshift(c, 1)
    end
  end
  crc_table[i] = c
end
local function crc_update(crc, byte)
  return bit32.bxor(crc_table[bit32.band(bit32.bxor(crc, byte), 0xff)], bit32.rshift(crc, 8))
end

local f_ip_src = Field.new("ip.src")
local f_ip_dst = Field.new("ip.dst")

local function ipv4_bytes(addr)
  local out = {}
  for octet in tostring(addr):gmatch("%d+") do out[#out + 1] = tonumber(octet) end
  return out
end

-- The CRC over the pseudo header (IPv4 source and destination, UDP ports),
-- the CommonHeader with crc 0, and the rest; nil without the IPv4 layer.
local function packet_crc(tvb, pinfo)
  local srcs, dsts = { f_ip_src() }, { f_ip_dst() }
  if #srcs == 0 or #dsts == 0 then return nil end
  local crc = 0xffffffff
  for _, b in ipairs(ipv4_bytes(srcs[#srcs].value)) do crc = crc_update(crc, b) end
  for _, b in ipairs(ipv4_bytes(dsts[#dsts].value)) do crc = crc_update(crc, b) end
  for _, port in ipairs({ pinfo.src_port, pinfo.dst_port }) do
    crc = crc_update(crc, bit32.rshift(port, 8))
    crc = crc_update(crc, bit32.band(port, 0xff))
  end
  local bytes = tvb:bytes()
  for i = 0, bytes:len() - 1 do
    local b = bytes:get_index(i)
    if i >= 32 and i < 36 then b = 0 end
    crc = crc_update(crc, b)
  end
  return bit32.bxor(crc, 0xffffffff)
end

local function add_flags(tree, field, range, table_)
  local item = tree:add(field, range)
  local known = 0
  local names = {}
  local value = range:uint()
  for _, fl in ipairs(table_) do
    item:add(fl.field, range)
    known = bit32.bor(known, fl[1])
    if bit32.band(value, fl[1]) ~= 0 then names[#names + 1] = fl[2]:upper() end
  end
  if #names > 0 then item:append_text(" (" .. table.concat(names, ", ") .. ")") end
  if bit32.band(value, bit32.bnot(known)) ~= 0 then
    item:add_proto_expert_info(e_malformed, "unknown flag bits set")
  end
  return value
end

local function nonzero_reserved(item, range)
  for i = 0, range:len() - 1 do
    if range(i, 1):uint() ~= 0 then
      item:add_proto_expert_info(e_malformed, "reserved, must be 0")
      return
    end
  end
end

local function dissect_cm(tvb, pinfo, tree)
  if tvb:len() < 32 or tvb(0, 4):le_uint() ~= CM_MAGIC_LE then return false end
  local t = tree:add(cm, tvb())
  t:add_le(cf.magic, tvb(0, 4))
  t:add_le(cf.version, tvb(4, 1))
  local ty = tvb(5, 1):uint()
  t:add_le(cf.type, tvb(5, 1))
  local n = tvb(6, 2):le_uint()
  t:add_le(cf.data_len, tvb(6, 2))
  t:add_le(cf.conn_id, tvb(8, 8))
  -- ip and port are little-endian integers (cm.cc's Put): the address
  -- a.b.c.d is the value's bytes from the most significant.
  local ip = string.format("%d.%d.%d.%d", tvb(19, 1):uint(), tvb(18, 1):uint(),
                           tvb(17, 1):uint(), tvb(16, 1):uint())
  t:add(cf.ip, tvb(16, 4), Address.ip(ip)):append_text(" (little-endian on the wire)")
  t:add_le(cf.port, tvb(20, 2))
  t:add(cf.mac, tvb(22, 6))
  t:add_le(cf.incarnation, tvb(28, 4))
  if n > 0 and tvb:len() >= 32 + n then t:add(cf.data, tvb(32, n)) end
  pinfo.cols.info:append(" CM " .. (cm_types[ty] or tostring(ty)))
  return true
end

-- One MsgHeader (40 bytes at e) under t; returns its flags and protocol.
local function add_msg_header(t, e, label)
  local st = t:add(bypass, e, label)
  st:set_text(label)
  st:add(f.msg_id, e(0, 4))
  local mflags = add_flags(st, f.msg_flags, e(4, 2), msg_flags)
  local proto = e(6, 1):uint()
  st:add(f.msg_protocol, e(6, 1))
  nonzero_reserved(st:add(f.msg_reserved, e(7, 1)), e(7, 1))
  st:add(f.msg_total_length, e(8, 8))
  st:add(f.msg_offset, e(16, 8))
  st:add(f.msg_tag, e(24, 8))
  st:add(f.msg_data, e(32, 8))
  return mflags, proto
end

-- A message's bytes p (a TvbRange, or nil) under its header e.
local function add_msg_bytes(tvb, pinfo, t, e, mflags, p)
  if p == nil then return end
  -- The fi provider's connection manager: tagged injects with tag bit 63.
  local tag_hi = e(24, 4):uint()
  if bit32.band(mflags, 1) ~= 0 and bit32.band(tag_hi, CM_TAG_BIT_HI) ~= 0 and
      e(16, 8):uint64() == UInt64(0) and dissect_cm(p:tvb(), pinfo, t) then
    return
  end
  t:add(f.payload, p)
end

local function dissect_data(tvb, pinfo, t, payload_off)
  local e = tvb(COMMON_LEN, 40)
  local mflags, proto = add_msg_header(t, e, "Message header")
  local info = string.format(" msg=%d off=%s/%s", e(0, 4):uint(), tostring(e(16, 8):uint64()),
                             tostring(e(8, 8):uint64()))
  if bit32.band(mflags, 1) ~= 0 then info = info .. " tag=0x" .. e(24, 8):uint64():tohex() end
  if proto == 1 then info = info .. " RTS" end
  pinfo.cols.info:append(info)
  local rest = tvb:len() - payload_off
  if proto == 1 and rest == 40 then
    local o = tvb(payload_off, 40)
    local ot = t:add(bypass, o, "In-place offer")
    ot:set_text("In-place offer")
    ot:add(f.offer_pid, o(0, 4))
    nonzero_reserved(ot:add(f.offer_reserved, o(4, 4)), o(4, 4))
    ot:add(f.offer_addr, o(8, 8))
    ot:add(f.offer_length, o(16, 8))
    ot:add(f.offer_guard_addr, o(24, 8))
    ot:add(f.offer_guard, o(32, 8))
    return
  end
  if bit32.band(mflags, 8) == 0 then
    add_msg_bytes(tvb, pinfo, t, e, mflags, rest > 0 and tvb(payload_off, rest) or nil)
    return
  end
  -- A bundle: each message's bytes (total_length, none if abandoned),
  -- then the next header, up to one without BUNDLE.
  local at, n = payload_off, 1
  while true do
    local len = 0
    if bit32.band(mflags, 4) == 0 then len = e(8, 8):uint64():tonumber() end
    if len > tvb:len() - at then
      t:add_proto_expert_info(e_malformed, "a bundled message runs past the packet")
      return
    end
    add_msg_bytes(tvb, pinfo, t, e, mflags, len > 0 and tvb(at, len) or nil)
    at = at + len
    if bit32.band(mflags, 8) == 0 then break end
    if tvb:len() - at < 40 then
      t:add_proto_expert_info(e_malformed, "a bundle ends inside a message header")
      return
    end
    e = tvb(at, 40)
    at = at + 40
    n = n + 1
    mflags = add_msg_header(t, e, "Bundled message header")
  end
  if at ~= tvb:len() then t:add_proto_expert_info(e_malformed, "bytes after a bundle's last message") end
  pinfo.cols.info:append(string.format(" bundle=%d msgs (to msg=%d)", n, e(0, 4):uint()))
end

local function dissect_rma(tvb, pinfo, t)
  local e = tvb(COMMON_LEN, 48)
  local st = t:add(bypass, e, "RMA header")
  st:set_text("RMA header")
  local op = e(0, 1):uint()
  st:add(f.rma_op, e(0, 1))
  add_flags(st, f.rma_flags, e(1, 1), rma_flags)
  st:add(f.rma_status, e(2, 1))
  nonzero_reserved(st:add(f.rma_reserved, e(3, 1)), e(3, 1))
  local id = st:add(f.rma_id, e(4, 4))
  id:add(f.rma_id_slot, e(4, 4))
  id:add(f.rma_id_generation, e(4, 4))
  st:add(f.rma_key, e(8, 8))
  st:add(f.rma_addr, e(16, 8))
  st:add(f.rma_total_length, e(24, 8))
  st:add(f.rma_offset, e(32, 8))
  local data = st:add(f.rma_data, e(40, 8))
  local info = string.format(" %s id=0x%08x key=0x%s off=%s/%s", rma_ops[op] or tostring(op),
                             e(4, 4):uint(), e(8, 8):uint64():tohex(),
                             tostring(e(32, 8):uint64()), tostring(e(24, 8):uint64()))
  if op == 4 or op == 6 then
    info = info .. " status=" .. (rma_status[e(2, 1):uint()] or tostring(e(2, 1):uint()))
  end
  if op == 5 or op == 6 then
    -- data: op in bits 0-7, datatype in 8-15, count in 16-31.
    data:add(f.atomic_op, e(47, 1))
    data:add(f.atomic_datatype, e(46, 1))
    data:add(f.atomic_count, e(44, 2))
    if e(40, 4):uint() ~= 0 then data:add_proto_expert_info(e_malformed, "bits 32-63 must be 0") end
    info = info .. " " .. (atomic_ops[e(47, 1):uint()] or "?") .. "/" ..
               (atomic_types[e(46, 1):uint()] or "?") .. "x" .. e(44, 2):uint()
  end
  pinfo.cols.info:append(info)
end

local function dissect_hello(tvb, pinfo, t)
  local e = tvb(COMMON_LEN, 56)
  local st = t:add(bypass, e, "Handshake header")
  st:set_text("Handshake header")
  st:add(f.hello_max_datagram, e(0, 2))
  nonzero_reserved(st:add(f.hello_reserved, e(2, 2)), e(2, 2))
  add_flags(st, f.hello_capabilities, e(4, 4), hello_capabilities)
  st:add(f.hello_nonce, e(8, 8))
  st:add(f.hello_echo, e(16, 8))
  st:add(f.hello_cookie, e(24, 16))
  st:add(f.hello_mac, e(40, 16))
  pinfo.cols.info:append(string.format(" nonce=0x%s echo=0x%s", e(8, 8):uint64():tohex(),
                                       e(16, 8):uint64():tohex()))
end

local function dissect_reset(tvb, pinfo, t)
  local e = tvb(COMMON_LEN, 24)
  local st = t:add(bypass, e, "Reset header")
  st:set_text("Reset header")
  local reason = e(0, 1):uint()
  st:add(f.reset_reason, e(0, 1))
  nonzero_reserved(st:add(f.reset_reserved, e(1, 3)), e(1, 3))
  st:add(f.reset_incarnation, e(4, 4))
  st:add(f.reset_mac, e(8, 16))
  pinfo.cols.info:append(" " .. (reset_reasons[reason] or tostring(reason)) ..
                         string.format(" incarnation=0x%08x", e(4, 4):uint()))
end

local function dissect_ack(tvb, pinfo, t, ack_psn)
  local e = tvb(COMMON_LEN, 40)
  local st = t:add(bypass, e, "ACK header")
  st:set_text("SACK bitmap")
  local held = {}
  for w = 0, 3 do
    local word = e(w * 8, 8)
    st:add(f.ack_sack, word)
    -- bit i of word w (from the least significant): PSN ack_psn + 1 + 64w + i.
    local lo, hi = word(4, 4):uint(), word(0, 4):uint()
    for i = 0, 63 do
      local v = i < 32 and bit32.extract(lo, i) or bit32.extract(hi, i - 32)
      if v ~= 0 then
        local psn = (ack_psn + 1 + w * 64 + i) % 4294967296
        st:add(f.ack_sacked, word, psn):set_generated()
        held[#held + 1] = psn
      end
    end
  end
  st:add(f.ack_next_msg_id, e(32, 4))
  nonzero_reserved(st:add(f.ack_reserved, e(36, 4)), e(36, 4))
  if #held > 0 then
    pinfo.cols.info:append(" sack=" .. table.concat(held, ",", 1, math.min(#held, 8)) ..
                           (#held > 8 and ",..." or ""))
  end
end

local function dissect(tvb, pinfo, tree)
  local len = tvb:len()
  pinfo.cols.protocol = "BYPASS"
  local t = tree:add(bypass, tvb())
  t:add(f.magic, tvb(0, 2))
  local version = tvb(2, 1):uint()
  local vi = t:add(f.version, tvb(2, 1))
  local ty = tvb(3, 1):uint()
  t:add(f.type, tvb(3, 1))
  local flags = add_flags(t, f.flags, tvb(4, 2), header_flags)
  t:add(f.credit, tvb(6, 2))
  t:add(f.src_incarnation, tvb(8, 4))
  t:add(f.dst_incarnation, tvb(12, 4))
  t:add(f.auth_key, tvb(16, 4))
  local psn = tvb(20, 4):uint()
  t:add(f.psn, tvb(20, 4))
  local ack_psn = tvb(24, 4):uint()
  t:add(f.ack_psn, tvb(24, 4))
  local li = t:add(f.length, tvb(28, 2))
  nonzero_reserved(t:add(f.reserved, tvb(30, 2)), tvb(30, 2))
  local crc = tvb(32, 4):uint()
  local ci = t:add(f.crc, tvb(32, 4))
  -- CRC-32C over a whole datagram only (a capture with a snaplen cuts it).
  local computed = nil
  local checksummed = true
  for _, fl in ipairs(header_flags) do
    if fl.no_crc and bit32.band(flags, fl[1]) ~= 0 then checksummed = false end
  end
  if checksummed and bypass.prefs.verify_crc and tvb:len() == tvb:reported_len() then
    computed = packet_crc(tvb, pinfo)
  end
  if computed == nil then
    t:add(f.crc_status, tvb(32, 4), 2):set_generated()
  elseif computed == crc then
    t:add(f.crc_status, tvb(32, 4), 1):set_generated()
  else
    t:add(f.crc_status, tvb(32, 4), 0):set_generated()
    ci:add_proto_expert_info(e_crc, string.format("CRC-32C mismatch: computed 0x%08x", computed))
  end

  local name = packet_types[ty] or ("type " .. ty)
  pinfo.cols.info = string.format("%s %d->%d psn=%d", name, pinfo.src_port, pinfo.dst_port, psn)
  if bit32.band(flags, 1) ~= 0 then
    pinfo.cols.info:append(string.format(" ack=%d credit=%d", ack_psn, tvb(6, 2):uint()))
  end
  if bit32.band(flags, 8) ~= 0 then
    pinfo.cols.info:append(" [retransmit]")
    t:add_proto_expert_info(e_retransmit)
  end
  if bit32.band(flags, 4) ~= 0 then
    pinfo.cols.info:append(" [RNR]")
    t:add_proto_expert_info(e_rnr)
  end
  if version ~= VERSION then
    vi:add_proto_expert_info(e_version, "version " .. version .. "; this dissector knows " ..
                                        VERSION)
    return
  end
  local ext = ext_len[ty]
  if ext == nil then
    t:add_proto_expert_info(e_malformed, "unknown packet type")
    return
  end
  if tvb:reported_len() < COMMON_LEN + ext then
    li:add_proto_expert_info(e_malformed, "shorter than the " .. name .. " header")
    return
  end
  if tvb:len() < COMMON_LEN + ext then return end  -- cut by the capture's snaplen
  local payload_off = COMMON_LEN + ext
  local payload_len = tvb:reported_len() - payload_off
  t:add(f.payload_length, tvb(payload_off - 1, 0), payload_len):set_generated()
  if ty == 1 or ty == 2 or ty == 7 then
    dissect_hello(tvb, pinfo, t)
  elseif ty == 3 then
    dissect_reset(tvb, pinfo, t)
  elseif ty == 4 then
    dissect_ack(tvb, pinfo, t, ack_psn)
  elseif ty == 5 then
    dissect_data(tvb, pinfo, t, payload_off)
  elseif ty == 6 then
    dissect_rma(tvb, pinfo, t)
    if tvb:len() > payload_off then t:add(f.payload, tvb(payload_off)) end
  end
end

function bypass.dissector(tvb, pinfo, tree)
  if tvb:len() < COMMON_LEN then return 0 end
  dissect(tvb, pinfo, tree)
  return tvb:len()
end

-- A bypass packet: the magic, and a length field that agrees with the datagram.
local function heuristic(tvb, pinfo, tree)
  if tvb:len() < COMMON_LEN or tvb(0, 2):uint() ~= MAGIC then return false end
  if tvb(28, 2):uint() ~= tvb:reported_len() - COMMON_LEN then return false end
  dissect(tvb, pinfo, tree)
  return true
end

bypass:register_heuristic("udp", heuristic)
DissectorTable.get("udp.port"):add_for_decode_as(bypass)
