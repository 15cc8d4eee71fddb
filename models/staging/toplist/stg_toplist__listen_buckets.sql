{#- Counts as stored, without merging: grouping the buckets here (one hash entry per bucket,
    country and song) cost more than all the ranking after it. Every model downstream sums
    `listens` over the keys it needs, which merges whatever the engine has not merged yet. -#}

with

source as (

    select * from {{ source('toplist', 'listens_by_10m') }}

),

final as (

    select
        bucket_start,
        country,
        song_id,
        finalizeAggregation(listens) as listens
    from source

)

select * from final
