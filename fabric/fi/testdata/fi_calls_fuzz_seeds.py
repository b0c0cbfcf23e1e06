# Writes the seed scripts of //fabric/fi:fi_calls_fuzz (each a byte-coded
# sequence of fi_* calls read as fi_calls_fuzz.cc reads it):
#   python3 fabric/fi/testdata/fi_calls_fuzz_seeds.py fabric/fi/testdata/fi_calls_fuzz
import sys, os
out = sys.argv[1]
def opens(mr=0x0e, caps=1, attrs=0, extra=b''):
    return bytes([caps, 0, mr, attrs]) + extra
def node(d):
    b = []
    b += [d, 0]                      # fi_domain
    b += [d, 1, 0, 0, 0, 0]          # av table slot 0
    b += [d, 2, 0, 4, 0, 0, 0]       # cq tagged slot 0
    b += [d, 3, 0, 0, 0]             # cntr slot 0 (byte&1==0 -> cntr; slot 0; events byte)
    b += [d, 5, 0, 0]                # endpoint slot 0
    b += [d, 6, 0, 3, 0, 0]          # bind av
    b += [d, 6, 0, 1, 0, 14]         # bind cq TRANSMIT|RECV
    b += [d, 7, 0, 0]                # enable
    return b
def exchange():
    b = []
    # dom0 ep0's name into dom1's av -> addrs[0]; dom1 ep1's name into dom0 av -> addrs[1]
    b += [0, 8, 0, 0, 1, 0, 200, 0, 1, 0, 0, 0]
    b += [0, 8, 1, 0, 0, 0, 200, 0, 1, 0, 1, 0]
    return b
def sendrecv(size=100, op=0):
    b = []
    b += [1, 11, 0, 2, 0, 1, 0xf0, 0]          # dom1 recv max, any src
    b += [0, 10, 0, 3, size & 0xff, size >> 8, 0, 1, 0, op, 1]  # dom0 send to addrs[1]
    b += [0, 21, 15]                            # progress
    b += [1, 14, 0, 4, 0]                       # read dom1 cq
    b += [0, 14, 0, 4, 0]                       # read dom0 cq
    return b
seeds = {}
seeds['pair_send'] = opens() + bytes(node(0) + node(1) + exchange() + sendrecv())
seeds['pair_tagged_inject'] = opens() + bytes(node(0) + node(1) + exchange() + sendrecv(8, 4) + sendrecv(4000, 2))
seeds['pair_rma'] = opens(caps=1, extra=b'') .replace(bytes([1]), bytes([1]), 1)
# RMA: caps index 1; register region dom1 with remote read/write (Flags byte 16 -> REMOTE_READ|WRITE)
b = node(0) + node(1) + exchange()
b += [1, 4, 0, 2, 0, 16, 0, 0]          # mr_reg dom1 slot0: len max, buf, access REMOTE_R|W, key byte 0, offset byte 0
b += [0, 13, 0, 1, 0, 1, 0, 0, 0]       # write: mr from dom1 slot0 (dom byte 1? uses s_.Byte()&1)
seeds['pair_rma'] = bytes([1, 0, 0x0e, 0]) + bytes(b)
# closing out of order: close cq and av while bound, domain with endpoint, then sends
b = node(0) + node(1) + exchange()
b += [0, 19, 1, 0] + [0, 19, 3, 0] + [0, 19, 6] + sendrecv()
seeds['close_order'] = opens() + bytes(b)
# error reads with a small err_data and api 1.4
b = node(0) + node(1) + exchange() + [0, 10, 0, 3, 0, 1, 0, 0xfa, 0, 0, 1] + [0, 21, 15] * 4 + [0, 14, 0, 1, 2, 1, 3]
seeds['readerr_v14'] = bytes([1, 0, 0x0e, 32]) + bytes(b)
# vectored with overflowing lengths
b = node(0) + node(1) + exchange() + [0, 12, 0, 0, 2, 3, 10, 0, 0, 0xfe, 3, 10, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
seeds['iov_overflow'] = opens() + bytes(b)
# multi-recv via rx_attr op_flags
b = node(0) + node(1) + exchange() + sendrecv() + sendrecv()
seeds['multi_recv'] = bytes([2, 0, 0x0e, 2, 3]) + bytes(b)
os.makedirs(out, exist_ok=True)
for k, v in seeds.items():
    open(os.path.join(out, k), 'wb').write(v)
print(len(seeds))
