set terminal pngcairo size 1100,1000 font "sans,10" noenhanced
set output "/work/main/bench/results/net/rekey-1g-local-20261127/net.png"
set datafile missing "-"
set multiplot layout 2,1
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid ytics
set logscale y
set format y '%g'
set ylabel "user KB/s (log scale)"
set key outside right top
set title 's3oramfs over emulated networks (bench/net-bench): user throughput per job'
plot "/work/main/bench/results/net/rekey-1g-local-20261127/net-plot.dat" using 2:xtic(1) title "local B=default"
set ylabel "bytes per user byte (log scale)"
set title 'Bytes on each link class per byte of user data (seqwrite; interface counters, headers included)'
plot "/work/main/bench/results/net/rekey-1g-local-20261127/net-bytes.dat" using 2:xtic(1) title 'client up', '' using 3 title 'client down', '' using 4 title 'server<->server'
unset multiplot
