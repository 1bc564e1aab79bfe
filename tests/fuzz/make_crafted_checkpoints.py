# How the crafted-* seeds of corpus/checkpoint were made: convnet-step1.pt with one
# tensor's stride or offset past its storage (PyTorch refuses them; libtorch loads them
# unchecked), or a storage declaring more elements than its record holds. Usage: make_crafted_checkpoints.py corpus/checkpoint/convnet-step1.pt OUTDIR
import sys, zipfile
src = sys.argv[1]
z = zipfile.ZipFile(src)
names = z.namelist()
pkl = [n for n in names if n.endswith("data.pkl")][0]
data = z.read(pkl)
def write(out, new):
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as w:
        for n in names:
            w.writestr(n, new if n == pkl else z.read(n))
# fc1.weight: sizes (10, 192), strides (192, 1) -> (65535, 1): 'K\xc0K\x01t' -> 'M\xff\xffK\x01t'
at = data.index(b"X\x0a\x00\x00\x00fc1.weight")
i = data.index(b"(K\xc0K\x01t", at)
write(sys.argv[2] + "/crafted-stride-65535", data[:i] + b"(M\xff\xffK\x01t" + data[i + 6:])
write(sys.argv[2] + "/crafted-stride-1000", data[:i] + b"(M\xe8\x03K\x01t" + data[i + 6:])
# fc1.bias: offset 1950 ('M\x9e\x07') -> 5000 ('M\x88\x13')
at = data.index(b"fc1.bias")
j = data.index(b"M\x9e\x07", at)
write(sys.argv[2] + "/crafted-offset-5000", data[:j] + b"M\x88\x13" + data[j + 3:])
# Storage '0' (conv1's 1960 floats, record archive/data/0 of 7840 bytes) declaring more
# elements than its record holds: libtorch sizes the storage from the count, so the stride
# check passed and reads went past the record. 2^40 elements with conv1.bias's offset moved
# past the record (27 -> 5000): SIGSEGV in pseval and --resume; 16 more: garbage evaluated.
k = data.index(b"X\x03\x00\x00\x00cpuq\x07M\xa8\x07t")
count = k + len(b"X\x03\x00\x00\x00cpuq\x07")
b = data.index(b"conv1.bias")
o = data.index(b"K\x1b", b)
huge = data[:count] + b"\x8a\x08\x00\x00\x00\x00\x00\x01\x00\x00" + data[count + 3:o] + b"M\x88\x13" + data[o + 2:]
write(sys.argv[2] + "/crafted-storage-2e40", huge)
write(sys.argv[2] + "/crafted-storage-overrun", data[:count] + b"M\xb8\x07" + data[count + 3:])
