set terminal pngcairo size 1000,620 font "sans,10" noenhanced
set bmargin 6
set xlabel offset 0,-1.2
set output "/work/main/bench/results/run-all-20261122-b/latency-vs-blocksize.png"
set datafile missing "-"
set grid
set key top left box opaque
set ytics nomirror
set logscale y
set format y '%g'
set mxtics 1
set title "ORAM access latency and payload rate vs block size (capacity 256M)"
set logscale x 2
set xrange [640:104858]
set xlabel "block size B (log scale); H and Z under each point"
set ylabel "ms per access (log scale)"
set y2label "payload MB/s = accesses/s x B (log scale)"
set logscale y2
set y2tics
set format y2 '%g'
plot "/work/main/bench/results/run-all-20261122-b/latency-vs-blocksize.dat" using 1:5:xtic(sprintf("%d\nH=%d Z=%d", $1, $3, $4)) with linespoints lw 2 pt 7 title 'mean ms', \
     "/work/main/bench/results/run-all-20261122-b/latency-vs-blocksize.dat" using 1:6 with linespoints pt 5 title 'p50 ms', \
     "/work/main/bench/results/run-all-20261122-b/latency-vs-blocksize.dat" using 1:7 with linespoints pt 9 title 'p99 ms', \
     "/work/main/bench/results/run-all-20261122-b/latency-vs-blocksize.dat" using 1:8 with linespoints pt 11 title 'max ms', \
     "/work/main/bench/results/run-all-20261122-b/latency-vs-blocksize.dat" using 1:9 axes x1y2 with linespoints lw 2 dt 2 lc rgb 'black' pt 4 title 'payload MB/s (right axis)'
