# Runs benchmarks/plot.py and checks what it wrote:
#   cmake -DPYTHON=<interpreter> -DPLOT=<plot.py> -DKIND=metrics|bench "-DINPUTS=<files>"
#         -DOUTPUT=<png> -DWIDTH=<pixels> -DHEIGHT=<pixels> "-DEXPECT_REGEX=<regex>"
#         -P check_plot.cmake
# Passes when plot.py exits 0, its summary of the curves matches EXPECT_REGEX, and OUTPUT is
# a PNG of WIDTH x HEIGHT pixels.
cmake_minimum_required(VERSION 3.25)

file(REMOVE "${OUTPUT}")
execute_process(COMMAND "${PYTHON}" "${PLOT}" ${KIND} ${INPUTS} -o "${OUTPUT}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "plot.py ${KIND} exited with ${rc}:\n${out}${err}")
endif()
if(NOT out MATCHES "${EXPECT_REGEX}")
  message(FATAL_ERROR "plot.py ${KIND}: its summary does not match '${EXPECT_REGEX}':\n${out}")
endif()
if(NOT EXISTS "${OUTPUT}")
  message(FATAL_ERROR "plot.py ${KIND} wrote no ${OUTPUT}")
endif()

# PNG: an 8-byte signature, then the IHDR chunk (length, "IHDR", width, height: big-endian).
file(READ "${OUTPUT}" head LIMIT 24 HEX)
string(SUBSTRING "${head}" 0 16 signature)
string(SUBSTRING "${head}" 24 8 chunk)
string(SUBSTRING "${head}" 32 8 width_hex)
string(SUBSTRING "${head}" 40 8 height_hex)
if(NOT signature STREQUAL "89504e470d0a1a0a" OR NOT chunk STREQUAL "49484452")
  message(FATAL_ERROR "${OUTPUT} is not a PNG file (starts with ${head})")
endif()
math(EXPR width "0x${width_hex}")
math(EXPR height "0x${height_hex}")
if(NOT width EQUAL WIDTH OR NOT height EQUAL HEIGHT)
  message(FATAL_ERROR "${OUTPUT} is ${width} x ${height} pixels, expected ${WIDTH} x ${HEIGHT}")
endif()
file(SIZE "${OUTPUT}" bytes)
message(STATUS "${OUTPUT}: PNG, ${width} x ${height} pixels, ${bytes} bytes")
